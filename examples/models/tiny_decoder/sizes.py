"""tiny_decoder's sizes, which every builder imports (`from .sizes import ...`), so that the three networks cannot
drift apart."""

WIDTH, HEADS, FFN, LAYERS = 64, 4, 256, 2
HEAD_DIM = WIDTH // HEADS
EPS = 1e-5  # LayerNorm
INIT_STD = 0.02  # GPT-2's: every matrix and embedding normal(0, 0.02), biases zero
