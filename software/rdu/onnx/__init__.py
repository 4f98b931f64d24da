"""The ONNX front end (``docs/onnx.md``): an ONNX model as a front-end graph
(:mod:`rdu.onnx.importer`, its operators in :mod:`rdu.onnx.ops`) and as a kernel the
command line runs and checks against onnxruntime (:mod:`rdu.onnx.kernel`).

``onnx`` and ``onnxruntime`` are imported when a model is read, not with this package.
"""

from .importer import import_model
from .kernel import KERNEL_NAME, OnnxKernel, onnx_kernel
from .values import OnnxImportError

__all__ = ["OnnxImportError", "import_model", "OnnxKernel", "onnx_kernel", "KERNEL_NAME"]
