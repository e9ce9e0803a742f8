"""nn.Linear with a faster CPU inference path: the product by the weight laid out (in, out) in memory."""
import torch
import torch.nn as nn


class Linear(nn.Linear):
    """nn.Linear (same parameters, same shapes, same state dict). On the CPU without autograd it computes
    x @ W^T with W^T contiguous: the first such call lays the parameter's own storage out (in, out) once (its
    values and shape unchanged), so the product costs no copy and the weight is held once.

    NOTE: torch 2.13's CPU F.linear ran 3-4x slower than that product on the 17-row chunks of the left sampler's
    passes (192 -> 512: 79 against 27 us, 192 -> 1024: 146 against 39 us, 2 threads) and no faster at any shape
    measured (1 to 400 rows). A verification pass of the shipped model (17 rows, 300-token prompt) took 0.84x the
    time with it and the chunk's keys written in the cache's spare room (interleaved, 15 x 40 passes); a whole turn
    0.98x (3 interleaved runs of 40 held-out dialogues, within this machine's noise). For SmolLM2's 1-row passes, 120
    products 576 -> 1536 with weights out of cache: 28 ms against 43 ms for F.linear on the usual layout. Until
    2026-12 the (in, out) layout was a second copy beside the parameter: 428 MB more for SmolLM2's blocks, which
    put `parley serve` at 1.69 GB. Only small weights are laid out (at most SMALL elements): unmeasured beyond.
    """

    SMALL = 1 << 22  # elements: 16 MB in float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (x.device.type != "cpu" or w.numel() > self.SMALL
                or torch.is_grad_enabled() and (w.requires_grad or x.requires_grad)):
            return super().forward(x)
        if not w.t().is_contiguous():
            # the same values and shape, stored (in, out); made outside inference mode, or the parameter would
            # become an inference tensor that autograd can no longer train
            with torch.inference_mode(False), torch.no_grad():
                w.data = w.detach().t().contiguous().t()
        y = x @ w.t()
        return y if self.bias is None else y + self.bias
