"""A real tensorflow-datasets builder for the embedded digits (array_record, Tensor features: no TensorFlow needed).

Used to exercise the tfds path offline: `DigitsBuilder(data_dir=D, file_format="array_record").download_and_prepare()`.
"""

import numpy as np
import tensorflow_datasets as tfds

from data.digits import digits_arrays


class Digits(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(shape=(8, 8, 1), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        (tr, trl), (te, tel) = digits_arrays()
        return {"train": self._generate_examples(tr, trl), "test": self._generate_examples(te, tel)}

    def _generate_examples(self, images, labels):
        for i, (im, lb) in enumerate(zip(images, labels)):
            yield i, {"image": im, "label": int(lb)}


def prepare(data_dir: str):
    Digits(data_dir=data_dir, file_format="array_record").download_and_prepare()
