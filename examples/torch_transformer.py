"""Train a small transformer encoder with torch.optim through sd.compile_module, in step with plain torch.

A sequence classifier as PyTorch writes it: token and learned position
embeddings, an `nn.TransformerEncoder` (multi-head self-attention with a key
padding mask, pre-norm layers, GELU feed-forward), mean pooling over the real
tokens and a linear head.  `sd.compile_module` runs the encoder layers from
their maths (torch.fx cannot trace their fused fast paths), forward and
backward as symdiff's kernels, holding the model's own parameters; SGD with
momentum steps them (Adam would do too, but it divides each gradient by its
running magnitude, so a near-zero gradient's float32 rounding moves a weight by
a whole step: the float32 runs would part from float64 by ~1e-2, symdiff's and
torch's alike, and say nothing about either).  As in torch_lenet.py a
plain-torch float32 copy and a float64 reference train on the same batches
(examples/in_step.py), and the script prints how far each float32 run's weights
drifted from the float64 one.  The task: sequences of random tokens, padded to
a common length, whose class is which of the first three tokens occurs most
often.  The encoder's dropout is 0.0: torch draws attention dropout inside its
fused kernels, which a compiled module cannot reproduce (sd.compile_module
refuses it in training).

Run:  python examples/torch_transformer.py [--steps 100] [--device cpu|vulkan|numpy] [--dim 32] [--batch 16]
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from in_step import sgd, train_in_step

VOCAB, CLASSES, PAD = 12, 3, 0


class Classifier(nn.Module):
    """Embeddings, a pre-norm transformer encoder, masked mean pooling, a linear head."""

    def __init__(self, dim: int, heads: int, layers: int, length: int):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.positions = nn.Parameter(0.02 * torch.randn(length, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, tokens, target):
        padding = tokens == PAD
        h = self.encoder(self.tokens(tokens) + self.positions, src_key_padding_mask=padding)
        real = (~padding).unsqueeze(-1).to(h.dtype)
        pooled = (h * real).sum(1) / real.sum(1)
        return F.cross_entropy(self.head(pooled), target)


def batches(count: int, size: int, length: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Token sequences (1..VOCAB-1, padded with PAD after a random length) and their class:
    the most frequent of tokens 1, 2, 3 (ties to the smallest)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        tokens = torch.randint(1, VOCAB, (size, length), generator=gen)
        lengths = torch.randint(length // 2, length + 1, (size, 1), generator=gen)
        tokens[torch.arange(length) >= lengths] = PAD
        counts = torch.stack([(tokens == c + 1).sum(1) for c in range(CLASSES)], 1)
        out.append((tokens, counts.argmax(1)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=12)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--device", default=None, help="symdiff device (default: SYMDIFF_DEVICE, else auto)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = Classifier(args.dim, args.heads, args.layers, args.length)
    train_in_step(model, batches(8, args.batch, args.length), args.steps, sgd, args.device)


if __name__ == "__main__":
    main()
