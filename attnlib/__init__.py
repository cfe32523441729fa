"""attnlib: the small library behind the attention-notebooks series.

Masks are boolean and True means "may attend" (the convention of the boolean
``attn_mask`` of ``torch.nn.functional.scaled_dot_product_attention``).
"""
from .attention import causal_mask, padding_mask, scaled_dot_product_attention
from .multihead import MultiHeadAttention
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, sinusoidal_encoding
from .training import get_device, seed_everything
from .tagger import TaggerConfig, TransformerTagger
from .transformer import FeedForward, TransformerBlock, TransformerEncoder
# --- helpers add their modules' exports below this line (one import line per module) ---
from .plotting import plot_curves, plot_heads, plot_heatmap

__version__ = "0.1.0"
