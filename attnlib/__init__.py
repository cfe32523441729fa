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
from .data import Batch, Seq2SeqData, Vocab, batches, format_date, make_copy, make_dates, make_reversal, make_sorting
from .rnn_attention import AdditiveAttention, LuongAttention, masked_softmax
from .seq2seq import AttentionDecoder, Decoder, DecoderState, Encoder, Seq2Seq, beam_search, greedy_decode, load_seq2seq, save_seq2seq
from .training import History, evaluate_seq2seq, progress_bar, sequence_accuracy, teacher_forcing_ratio, token_accuracy, train_seq2seq
from .minilm import MiniLM, MiniLMOutput, WordPieceTokenizer, load_minilm
from .plotting import plot_curves, plot_heads, plot_heatmap
from .widgets import AttentionExplorer, AttentionHeatmap
from .paths import model_path, save_path
from .exercises import check

__version__ = "0.1.0"
