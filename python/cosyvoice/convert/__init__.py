"""cosyvoice.convert - the released Fun-CosyVoice3-0.5B model folder to one libcosyvoice model file.

    cosyvoice-convert RELEASED_FOLDER -o model.gguf [--rl]      (the console command)
    python -m cosyvoice.convert RELEASED_FOLDER -o model.gguf   (the same)

    from cosyvoice.convert import convert
    convert("Fun-CosyVoice3-0.5B", "model.gguf")

numpy only; the front-end .onnx files need the `onnx` package. The modules: converter (checkpoint
mapping, tokenizer, grammars, writing; the command), config (cosyvoice3.yaml), frontend (speech
tokenizer and CAM++), ptread (torch.save files without torch), gguf_writer, torch_rng (the flow's
noise), cosyvoice3_tokens (the special tokens). The file format is docs/model-format.md.
"""
from .converter import ConvertError, convert, main

__all__ = ["ConvertError", "convert", "main"]
