"""Probe (GPU, scan off): can a candidate read the current best's outputs in paired timing?

On CUDA the two paired runners each map both buffers, and both sides of a pair get the
same inputs. This candidate finds the other buffer through ``gc`` and, in each block,
checks whether the other side's output slot already holds exactly this call's answer. If
it does, the answer leaked: it writes the answer plus one, so the judge's check fails with
``wrong_values`` and the leak shows. Where nothing leaked it computes honestly: the
evaluation passes its checks (and is not accepted: it is no faster). Outside paired timing
(one runner, one buffer) there is no peer and it only computes.
"""

import gc

import torch
import triton
import triton.language as tl


@triton.jit
def _add_probe(x_ptr, y_ptr, p_ptr, out_ptr, n, HAS_PEER: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    s = x + y
    if HAS_PEER:
        p = tl.load(p_ptr + offs, mask=m, other=0.0)
        same = tl.sum(tl.where(m, (p == s).to(tl.int32), 1), axis=0) == BLOCK
        s = tl.where(same, s + 1.0, s)  # the whole block leaked: fail loudly
    tl.store(out_ptr + offs, s, mask=m)


_peers: dict[int, torch.Tensor | None] = {}


def _real_ptr(out):
    """Where ``out`` really is. In a kernel-only task the launcher is handed a decoy
    (sandbox/runner/twin.py); the scan being off, ``gc`` reaches the runner's decoy map too."""
    for o in gc.get_objects():
        if type(o).__name__ == "Twins" and type(o).__module__ == "sandbox.runner.twin":
            e = o._map.get(out.untyped_storage().data_ptr())
            if e is not None:
                return e.real.data_ptr() + out.data_ptr() - out.untyped_storage().data_ptr() + e.delta
    return out.data_ptr()


def _peer_view(out):
    """The other buffer's view at ``out``'s offset, or None when no runner shares one."""
    bases = [o for o in gc.get_objects()
             if isinstance(o, torch.Tensor) and o.is_cuda and o.dtype == torch.uint8 and o.dim() == 1]
    ptr = _real_ptr(out)
    own = [b for b in bases if b.data_ptr() <= ptr < b.data_ptr() + b.numel()]
    if not own:
        raise RuntimeError("probe broken: no uint8 buffer holds the output")
    base = max(own, key=lambda b: b.numel())
    peers = [b for b in bases if b.numel() == base.numel() and b.data_ptr() != base.data_ptr()]
    if not peers:
        return None
    off = ptr - base.data_ptr()
    raw = peers[0][off: off + out.numel() * out.element_size()]
    return raw.view(out.dtype).view(out.shape)


def launch(x, y, out):
    key = _real_ptr(out)
    if key not in _peers:
        _peers[key] = _peer_view(out)
    peer = _peers[key]
    n = out.numel()
    _add_probe[(triton.cdiv(n, 1024),)](x, y, peer if peer is not None else out, out, n,
                                        HAS_PEER=peer is not None, BLOCK=1024)
