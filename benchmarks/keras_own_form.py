"""The runners' Keras definitions against Keras' own form of the same network (keras.applications), on one backend:
both built, compiled as a Keras runner compiles a model (its optimizer and loss, Keras' "auto" compilation), and stepped in the same bare loop
(train_on_batch or predict_on_batch, which return to the host at every step); repetitions alternate ours, Keras',
ours, ... so that drift favours neither. A benchmark, not a test: it always exits 0.

The networks are not always the same: ours match PyTorch's (torchvision's ResNet is v1.5, its stride on the 3x3
convolution; Keras' ResNet50 is v1, on the 1x1; ours pad explicitly where PyTorch does; Keras' EfficientNet
rescales and normalizes its input in the model), so each side's parameter count is printed beside its time.

    KERAS_BACKEND=jax .venvs/jax/bin/python benchmarks/keras_own_form.py --models resnet50,vgg16 --mode train
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time
from functools import partial

import numpy as np

# Ours by name, and Keras' own form of it (its class in keras.applications).
OWN_FORMS = {
    "resnet50": "ResNet50",
    "vgg16": "VGG16",
    "mobilenet_v2": "MobileNetV2",
    "efficientnet_b0": "EfficientNetB0",
}


def steps_s(step, warmup: int, steps: int) -> list[float]:
    times = []
    for _ in range(warmup + steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return times[warmup:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50", help=f"comma-separated, of {', '.join(OWN_FORMS)}")
    parser.add_argument("--mode", default="train", choices=["train", "infer"])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=64, help="height and width (default 64)")
    parser.add_argument("--warmup", type=int, default=5, help="steps excluded per repetition (default 5)")
    parser.add_argument("--steps", type=int, default=10, help="measured steps per repetition (default 10)")
    parser.add_argument("--repetitions", type=int, default=4, help="per side, alternating (default 4)")
    args = parser.parse_args()
    names = args.models.split(",")
    if unknown := [name for name in names if name not in OWN_FORMS]:
        parser.error(f"--models: {', '.join(unknown)} has no Keras form here; the models are {', '.join(OWN_FORMS)}")
    # The native runner's start-up settings for its framework, as the Keras runners import them (fwbench_keras.serve);
    # here, after --help, which needs no framework.
    importlib.import_module(f"fwbench_{os.environ.setdefault('KERAS_BACKEND', 'tensorflow')}.__main__")
    import keras
    from fwbench_keras.models import MODELS
    from fwbench_keras.objectives import loss
    from fwbench_keras.workload import optimizer

    from fwbench_core.builtin import MODEL_SPECS
    from fwbench_core.choices import Precision

    def compiled(model, head):
        """Compiled as a Keras runner compiles a model: its optimizer and loss, Keras' own "auto" compilation."""
        model.compile(optimizer=optimizer(Precision.FP32), loss=loss(head), jit_compile="auto")
        return model

    shape = (args.image_size, args.image_size, 3)
    random = np.random.default_rng(0)
    inputs = random.standard_normal((args.batch_size, *shape), dtype=np.float32)
    print(f"keras {keras.__version__} on {keras.backend.backend()}, {args.mode} b{args.batch_size} {shape}")
    for name in names:
        spec = MODEL_SPECS[name]
        head = spec.head({})
        classes = head.outputs
        labels = random.integers(0, classes, args.batch_size)
        own_form = getattr(keras.applications, OWN_FORMS[name])
        sides = {
            "ours": compiled(MODELS.builder(spec).build(spec, shape, {}), head),
            "keras.applications": compiled(
                own_form(weights=None, input_shape=shape, classes=classes, classifier_activation=None), head
            ),
        }
        medians: dict[str, list[float]] = {side: [] for side in sides}
        for repetition in range(args.repetitions):
            order = list(sides) if repetition % 2 == 0 else list(sides)[::-1]
            for side in order:
                model = sides[side]
                # Both return to the host at every step, as the Keras runners' steps do.
                step = (
                    partial(model.train_on_batch, inputs, labels)
                    if args.mode == "train"
                    else partial(model.predict_on_batch, inputs)
                )
                times = steps_s(step, args.warmup, args.steps)
                medians[side].append(statistics.median(times))
        for side, model in sides.items():
            print(
                f"  {name} {side:<18} {statistics.median(medians[side]) * 1e3:8.2f} ms a step "
                f"(repetitions {', '.join(f'{m * 1e3:.1f}' for m in medians[side])}), {model.count_params():,} parameters"
            )
        ratio = statistics.median(medians["ours"]) / statistics.median(medians["keras.applications"])
        print(f"  {name} ours / keras.applications = {ratio:.3f}")


if __name__ == "__main__":
    main()
