"""The models every runner serves, by name, with the inputs they accept and their heads.

One entry here plus one builder per framework adds a model.
"""

from __future__ import annotations

from .errors import NotFound, did_you_mean, echoed
from .spec import Head, InputKind, ModelSpec, Objective, Task

IMAGENET_CLASSES = 1000
MAX_IMAGE_SIDE = 4096


def _vision(name: str, side: int = 224, min_side: int = 32) -> ModelSpec:
    return ModelSpec(
        name=name,
        task=Task.VISION,
        input_kind=InputKind.IMAGE,
        input_convention="CxHxW",
        default_input_shape=(3, side, side),
        min_input_shape=(3, min_side, min_side),
        max_input_shape=(3, MAX_IMAGE_SIDE, MAX_IMAGE_SIDE),
        heads=(("classification", Head(Objective.CLASSIFY, IMAGENET_CLASSES)),),
    )


def _text(name: str, seq: int, max_seq: int, vocab: int, heads: tuple) -> ModelSpec:
    return ModelSpec(
        name=name,
        task=Task.NLP,
        input_kind=InputKind.TOKENS,
        input_convention="seq",
        default_input_shape=(seq,),
        min_input_shape=(1,),
        max_input_shape=(max_seq,),
        heads=heads,
        vocab_size=vocab,
    )


BERT_VOCAB = 30522
GPT2_VOCAB = 50257
LSTM_LM_VOCAB = 10000
# Characters a-z, space, apostrophe, and the CTC blank (index 0).
SPEECH_ALPHABET = 29
WAV2VEC2_ALPHABET = 32

MODEL_SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _vision("resnet18"),
        _vision("resnet50"),
        _vision("resnet152"),
        _vision("vgg16"),
        _vision("mobilenet_v2"),
        _vision("efficientnet_b0"),
        _vision("efficientnet_b4", side=380),
        _vision("inception_v3", side=299, min_side=75),
        _text(
            "bert_base", 128, 512, BERT_VOCAB,
            (("classification", Head(Objective.CLASSIFY, 2)), ("mlm", Head(Objective.TOKEN_CE, BERT_VOCAB))),
        ),
        _text("gpt2_small", 1024, 1024, GPT2_VOCAB, (("causal_lm", Head(Objective.TOKEN_CE, GPT2_VOCAB)),)),
        _text("lstm_lm", 35, 4096, LSTM_LM_VOCAB, (("lm", Head(Objective.TOKEN_CE, LSTM_LM_VOCAB)),)),
        ModelSpec(
            name="deepspeech2",
            task=Task.SPEECH,
            input_kind=InputKind.SPECTROGRAM,
            input_convention="FxT",  # 161 linear-frequency bins (20 ms window at 16 kHz) x frames
            default_input_shape=(161, 400),
            min_input_shape=(161, 16),
            max_input_shape=(161, 10000),
            heads=(("ctc", Head(Objective.CTC, SPEECH_ALPHABET)),),
        ),
        ModelSpec(
            name="wav2vec2_base",
            task=Task.SPEECH,
            input_kind=InputKind.AUDIO,
            input_convention="audio",  # raw 16 kHz samples
            default_input_shape=(16000,),
            min_input_shape=(400,),
            max_input_shape=(480000,),
            heads=(("ctc", Head(Objective.CTC, WAV2VEC2_ALPHABET)),),
        ),
    )
}


def get_spec(name: str) -> ModelSpec:
    try:
        return MODEL_SPECS[name]
    except KeyError:
        known = ", ".join(sorted(MODEL_SPECS))
        raise NotFound(f"unknown model {echoed(name)}{did_you_mean(name, MODEL_SPECS)}; known models: {known}") from None
