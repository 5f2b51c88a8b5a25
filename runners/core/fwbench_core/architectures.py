"""Hyper-parameters of the hand-built networks, which both runners' builders must share exactly.

Vision models come from torchvision on one side and mirror it on the other; the text and speech
networks are written in each framework from these numbers, so they live here once.
"""

from __future__ import annotations

from .errors import InvalidArgument

# --- text ---------------------------------------------------------------------------------------

BERT = dict(hidden=768, layers=12, heads=12, ffn=3072, max_positions=512, type_vocab=2, eps=1e-12, dropout=0.1)
GPT2 = dict(hidden=768, layers=12, heads=12, ffn=3072, max_positions=1024, eps=1e-5, dropout=0.1)
LSTM_LM = dict(embedding=650, hidden=650, layers=2, dropout=0.5)
INIT_STD = 0.02  # the normal initialisation's standard deviation in BERT and GPT-2

# --- deepspeech2 --------------------------------------------------------------------------------

DS2_CONVS = (  # (out channels, kernel (F, T), stride (F, T), padding (F, T))
    (32, (41, 11), (2, 2), (20, 5)),
    (32, (21, 11), (2, 1), (10, 5)),
)
DS2_RNN_LAYERS = 3
DS2_HIDDEN = 512

# --- wav2vec2_base ------------------------------------------------------------------------------

W2V_CONV_CHANNELS = 512
W2V_CONVS = ((10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2))  # (kernel, stride)
W2V_DIM = 768
W2V_HEADS = 12
W2V_FFN = 3072
W2V_LAYERS = 12
W2V_POS_KERNEL = 128
W2V_POS_GROUPS = 16
W2V_DROPOUT = 0.1
W2V_EPS = 1e-5

# --- llama_small --------------------------------------------------------------------------------

# Per size, the declaration's option size=small|tiny. small is GPT-2 small's size (124.7M parameters against 124.4M),
# so the two decoders compare; tiny is for tests on a CPU. The vocabulary is the declaration's (32,000 for both: token
# ids are drawn below it). Query heads share key-value heads in groups.
LLAMA_SIZE_OPTION = "size"
LLAMA_SIZES = dict(
    small=dict(hidden=768, layers=12, heads=12, kv_heads=4, mlp=2048, max_positions=2048),
    tiny=dict(hidden=64, layers=2, heads=4, kv_heads=2, mlp=128, max_positions=2048),
)
LLAMA_EPS = 1e-5  # RMSNorm's
LLAMA_ROPE_THETA = 10000.0  # the rotary embedding's base: position p turns pair i by p / theta^(2i / head width)

# --- vit_b16 ------------------------------------------------------------------------------------

# ViT-B/16 as torchvision's vit_b_16: 16x16 patches, 12 pre-LayerNorm encoder layers, a class token, learned
# position embeddings, exact GELU, no dropout (torchvision's default of 0).
VIT_B16 = dict(patch=16, layers=12, hidden=768, heads=12, mlp=3072)
VIT_EPS = 1e-6  # the LayerNorms'
VIT_POSITION_STD = 0.02  # the position embeddings' initial normal spread, as torchvision's


def vit_patch_grid(height: int, width: int) -> tuple[int, int]:
    """The rows and columns of patches ViT-B/16 cuts an image into. The position embeddings are one per patch and
    one for the class token, sized from the image the run asks for (as torchvision's vit_b_16 fixes its image
    size when built), so a side that is not a whole number of patches is refused rather than cropped."""
    patch = VIT_B16["patch"]
    if height % patch or width % patch:
        raise InvalidArgument(
            f"vit_b16 cuts images into {patch}x{patch} patches: height and width must be multiples of {patch}, "
            f"got {height}x{width}"
        )
    return height // patch, width // patch
