"""Confirming a live estimate: the worst-case step measured on the GPU (or traced on CPU), with the
user's model, optimizer and RNG state saved before and put back bit for bit after."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memlint.errors import MemlintError
from memlint.library.api import attention
from memlint.notebook.live import LivePlan, base_model, unique_named

@dataclass
class Confirmation:
    """The measured step beside the estimate, or the OOM that answered the question."""

    measurement: Any | None       # memlint.measure.Measurement
    oom: str | None               # "does not fit: OOM in the backward phase after 71.30 GiB allocated …"
    mode: str                     # cuda | cpu | trace
    how: str                      # what ran, and on which copy of the model
    setup: Any                    # the Setup that was measured
    restored: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)


def _to_host(t: Any) -> Any:
    """A copy of one tensor in host memory (the tests inject a failure here)."""
    return t.detach().to("cpu", copy=True)


def _to_device(saved: Any, device: Any) -> Any:
    return saved.to(device)


def _run_all(actions: list) -> None:
    """Run every action even when one is interrupted: an action that raises (a Ctrl-C, a
    transient error) is run once more, and after all of them the first KeyboardInterrupt, or
    an error that happened twice, is raised. A restore half done would lose the user's state."""
    interrupt: BaseException | None = None
    failed: BaseException | None = None
    for act in actions:
        for attempt in (1, 2):
            try:
                act()
                break
            except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt included, by design
                if isinstance(exc, KeyboardInterrupt):
                    interrupt = interrupt or exc
                elif attempt == 2:
                    failed = failed or exc
    if interrupt is not None or failed is not None:
        raise interrupt or failed  # type: ignore[misc]


class StateSnapshot:
    """The user's state a training step can change, saved and put back bit for bit:
    trainable parameters and buffers (copied to host memory, so the GPU is not charged
    twice), gradients (moved off the device for the step), requires_grad flags, every
    module's attributes and hooks (train/eval mode, gradient-checkpointing switches,
    enable_input_require_grads hooks), and the torch CPU/CUDA, Python and numpy RNGs.

    Transactional: everything is copied before anything is changed, so a Ctrl-C or a host OOM
    during the copy leaves the model as it was (the gradients are cleared only once all are
    on the host, all or none); `restore` puts back every piece even when interrupted."""

    def __init__(self, model: Any) -> None:
        import torch

        self.model = model
        self.params = unique_named(model)
        with torch.no_grad():
            data = {id(p): _to_host(p) for _, p in self.params if p.requires_grad}
            buffers = [(b, _to_host(b)) for b in model.buffers()]
            grads = {id(p): (p.grad.device, _to_host(p.grad)) for _, p in self.params if p.grad is not None}
        self.data, self.buffers, self.grads = data, buffers, grads
        self.requires_grad = {id(p): p.requires_grad for _, p in self.params}
        self.modules = [(m, dict(m.__dict__), {k: dict(v) for k, v in m.__dict__.items() if _is_hook_dict(k, v)})
                        for m in model.modules()]
        self.rng = RngSnapshot()
        live = [(p, p.grad) for _, p in self.params if id(p) in grads]
        try:  # the one change before the step: the gradients leave the device
            for p, _ in live:
                p.grad = None
        except BaseException:
            for p, g in live:
                p.grad = g
            raise

    def restore(self) -> tuple[str, ...]:
        import torch

        actions: list = []
        for _, p in self.params:
            saved = self.data.get(id(p))
            if saved is not None:
                actions.append(lambda p=p, saved=saved: p.data.copy_(_to_device(saved, p.device)))
        actions += [lambda b=b, saved=saved: b.copy_(_to_device(saved, b.device)) for b, saved in self.buffers]
        for _, p in self.params:
            actions.append(lambda p=p: _put_grad(p, self.requires_grad[id(p)], self.grads.get(id(p))))
        actions += [lambda m=m, a=a, h=h: _put_module(m, a, h) for m, a, h in self.modules]
        rng: list[str] = []
        actions.append(lambda: rng.extend(self.rng.restore()))
        with torch.no_grad():
            _run_all(actions)
        return ("trainable parameters", "buffers", "gradients", "requires_grad", "train/eval mode",
                "gradient checkpointing", "hooks", *rng)


def _put_grad(p: Any, requires_grad: bool, saved: Any) -> None:
    p.requires_grad_(requires_grad)
    p.grad = None if saved is None else _to_device(saved[1], saved[0])


def _put_module(module: Any, attrs: dict, hooks: dict) -> None:
    for k in [k for k in module.__dict__ if k not in attrs]:
        del module.__dict__[k]
    for k, v in attrs.items():
        module.__dict__[k] = v
    for k, saved in hooks.items():
        live = module.__dict__[k]
        live.clear()
        live.update(saved)


def _is_hook_dict(key: str, value: Any) -> bool:
    """Dicts a step may change in place: hooks, and a module's parameter/child tables."""
    return isinstance(value, dict) and (key in ("_parameters", "_buffers", "_modules")
                                        or (key.startswith("_") and "hooks" in key))


class RngSnapshot:
    """Only the RNGs: what a step on a copy of the model can still change (measure seeds torch)."""

    def __init__(self) -> None:
        import random
        import sys

        import torch

        self.cpu = torch.get_rng_state()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.cuda = torch.cuda.get_rng_state_all() if cuda else None
        self.py = random.getstate()
        np = sys.modules.get("numpy")
        self.np = np.random.get_state() if np is not None else None

    def restore(self) -> tuple[str, ...]:
        import random
        import sys

        import torch

        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.py)
        np = sys.modules.get("numpy")
        if self.np is not None and np is not None:
            np.random.set_state(self.np)
        return ("RNG (torch CPU" + (", CUDA" if self.cuda is not None else "") + ", python, numpy)",)


def meta_copy(model: Any) -> Any:
    """A copy of `model` whose parameters and buffers live on the meta device: the same
    modules, adapters, hooks and switches, no data copied (the memo hands deepcopy a meta
    tensor for every parameter and buffer, tied ones once)."""
    import copy

    import torch

    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(model, memo)


_PHASE_MARKERS = (
    ("optimizer", ("optimizer.step(", "clip_grad_norm_(", "scaler.step(", "scaler.unscale_(")),
    ("backward", (".backward(",)),
    ("model build", ("_build_model(", "_apply_lora(", "_quantize(", "._apply(")),
    ("forward", ("model(",)),  # after the build markers: "_build_model(" holds "model("
)


def _oom_answer(exc: BaseException, mode: str) -> str | None:
    """The "does not fit" answer an out-of-memory error gives (None for any other error): a CUDA
    OOM, or the in-place CPU step asking the host for more than it has."""
    import re
    import traceback

    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        tried = re.search(r"Tried to allocate ([0-9.]+ [KMGT]?i?B)", str(exc))
        peak = torch.cuda.max_memory_allocated() if mode == "cuda" else 0
        answer = (f"does not fit: OOM in the {oom_phase(exc.__traceback__)} phase after {peak / (1 << 30):.2f} GiB "
                  "allocated" + (f" (tried to allocate {tried.group(1)} more)" if tried else ""))
    elif mode == "cpu" and _host_oom(exc):
        answer = (f"does not fit in host memory: the CPU step ran out of memory in the {oom_phase(exc.__traceback__)} "
                  f"phase ({' '.join(str(exc).split())[:160] or type(exc).__name__})")
    else:
        return None
    traceback.clear_frames(exc.__traceback__)  # the frames hold the step's tensors
    return answer


def _host_oom(exc: BaseException) -> bool:
    """torch's CPU allocator refusing a tensor ("DefaultCPUAllocator: can't allocate memory"), or Python's."""
    text = str(exc)
    return isinstance(exc, MemoryError) or "can't allocate memory" in text or "not enough memory" in text


def oom_phase(tb: Any) -> str:
    """The training phase an exception was raised in, read off the traceback's source
    lines (the measured loop names its phases in its code)."""
    import traceback

    for frame in traceback.extract_tb(tb):
        line = frame.line or ""
        for phase, marks in _PHASE_MARKERS:
            if any(m in line for m in marks):
                return phase
    return "step"


def host_available() -> int | None:
    """Bytes of host memory available now (Linux /proc/meminfo MemAvailable, else free pages); None: unknown."""
    import os

    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def host_shortfall(est: Any, available: int | None = None, margin: float = 0.10) -> str | None:
    """Why a real CPU step must not run (None: it may): what the step allocates beyond the model it runs on (the
    estimate's allocated peak less the weights, plus the snapshot's copy of the trainable state), against the
    host memory available with a margin. A step past it would take the whole machine, the kernel with it."""
    available = host_available() if available is None else available
    if available is None:
        return None
    need = est.allocated_peak - est.bytes("weights") + est.bytes("gradients")
    if need <= available * (1 - margin):
        return None
    gib = 1 << 30
    return (f"not run on CPU: the step needs about {need / gib:.1f} GiB of host memory beyond your model "
            f"(the estimate's allocated peak {est.allocated_peak / gib:.1f} GiB, less the weights already loaded, "
            f"plus the saved copy of the trainable state) and {available / gib:.1f} GiB is available; "
            "--device trace measures it as fake tensors (no memory), or lower --batch / --seq")


def resolve_mode(device: str, model: Any) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "trace"
    if device in ("cuda", "cpu", "trace"):
        if device == "cuda" and not torch.cuda.is_available():
            raise MemlintError("--device cuda asked for, but torch sees no CUDA device")
        return device
    raise MemlintError(f"unknown device {device!r}: expected auto, cuda, cpu or trace")


def _host_need(lp: LivePlan, setup: Any, steps: int, measure_fn: Any) -> tuple[int, int]:
    """(bytes the in-place CPU step adds to host memory, its traced allocated peak): the step's own trace (a fake-tensor
    run of a meta copy of the model, nothing allocated) less the weights already resident, plus what the StateSnapshot
    copies before the step (trainable parameters, buffers, gradients)."""
    rng = RngSnapshot()  # measure seeds torch: the user's RNGs are put back after the trace
    try:
        if setup.quant == "none":
            traced = measure_fn(setup, device="trace", steps=steps, model=meta_copy(lp.model))
        else:
            traced = measure_fn(setup, device="trace", steps=steps)
    finally:
        rng.restore()
    snap = 0
    for _, p in unique_named(lp.model):
        if p.requires_grad:
            snap += p.numel() * p.element_size()
        if p.grad is not None:
            snap += p.grad.numel() * p.grad.element_size()
    snap += sum(b.numel() * b.element_size() for b in lp.model.buffers())
    return traced.measured_peak - traced.components["weights"] + snap, traced.measured_peak


def _host_check(lp: LivePlan, setup: Any, steps: int, measure_fn: Any, notes: list[str]) -> "Confirmation | None":
    """Real tensors in host memory: %memcheck checked the estimate (host_shortfall); the step's own trace says what it
    will ask for, so refuse (a Confirmation saying so) before running it when the host does not have that much
    available (a host OOM mid-step could take the kernel with it); None: it may run (said in `notes`)."""
    need, traced_peak = _host_need(lp, setup, steps, measure_fn)
    avail = host_available()
    gib = 1 << 30
    if avail is not None and need > avail:
        # not an answer about the GPU: the verdict stays the estimate's
        return Confirmation(None, None, "cpu", (
            f"not run: the CPU step would need {need / gib:.2f} GiB more host memory (its fake-tensor trace: allocated "
            f"peak {traced_peak / gib:.2f} GiB, less the weights already loaded, plus the state saved for restoring), "
            f"{avail / gib:.2f} GiB is available; --device trace measures the same step without memory"), setup, (), notes)
    notes.append(f"host memory checked first: the step adds {need / gib:.2f} GiB (its trace) of "
                 + (f"{avail / gib:.2f} GiB available" if avail is not None else "an unknown amount available"))
    return None


def confirm(lp: LivePlan, *, device: str = "auto", steps: int = 2, measure_fn: Any = None) -> Confirmation:
    """Run `steps` training steps of the worst-case micro-batch and measure them, leaving
    the user's model, optimizer and RNGs as they were.

    cuda: on the user's model in place when it is on the GPU (a copy would double the
    weights being measured), with a StateSnapshot restored afterwards; else on a fresh
    model built from its config. trace: on a meta-device copy of the user's model, run as
    fake tensors (no memory). cpu: in place with real tensors (small models).
    """
    import gc

    import torch

    if measure_fn is None:
        from memlint.measure import measure as measure_fn
    mode = resolve_mode(device, lp.model)
    notes: list[str] = []
    # a rebuilt model gets its adapters from the Setup, so it follows the estimated loop;
    # the user's own model (or its meta copy) runs the loop as it really is
    rebuilt = (mode == "trace" and lp.setup.quant != "none") or (mode == "cuda" and lp.facts.device != "cuda")
    setup = lp.setup if rebuilt or lp.run_setup is None else lp.run_setup
    if setup.grad_accum > 2:
        # the peak with accumulation is the second micro-batch's (gradients alive); more add nothing
        setup = setup.with_(grad_accum=2)
        notes.append(f"gradient accumulation {lp.setup.grad_accum}: measured with 2 micro-batches a step "
                     "(every later micro-batch repeats the second's peak)")
    on_device = lp.facts.device
    if mode == "cpu":
        refused = _host_check(lp, setup, steps, measure_fn, notes)
        if refused is not None:
            return refused
    snapshot: Any
    if mode == "trace":
        if setup.quant == "none":
            model, how = meta_copy(lp.model), ("fake-tensor trace on CPU of a meta-device copy of your model "
                                               "(no data copied, no memory used); your model was not touched")
            trace_as = attention()[setup.attn].trace_as
            if setup.attn != trace_as:
                # as memlint.measure does for the models it builds: the CPU has no flash kernel,
                # SDPA's flash path saves the same tensors
                base_model(model).set_attn_implementation(trace_as)
                notes.append(f"{setup.attn} traced as {trace_as} on the copy (the same saved tensors)")
        else:
            model, how = None, ("fake-tensor trace on CPU of a fresh model built from your model's config "
                                "(a 4-bit base is rebuilt by memlint.measure); your model was not touched")
        snapshot = RngSnapshot()
    elif mode == "cuda" and on_device != "cuda":
        model, how = None, ("CUDA, on a fresh model built from your model's config (random weights): your model "
                            f"is on {on_device}; it was not touched")
        snapshot = RngSnapshot()
    else:
        model = lp.model
        how = (f"{'CUDA' if mode == 'cuda' else 'CPU (real tensors, storage tracker)'}, on your model in place: "
               "state saved before and restored after")
        snapshot = StateSnapshot(lp.model)
        if mode == "cuda":
            notes.append("measured weights = everything allocated on the GPU before the step: the model and any "
                         "other tensors the notebook holds (an optimizer state from an earlier train(), batches)")
    measurement = oom = None
    try:
        measurement = measure_fn(setup, device=mode, steps=steps, model=model)
    except (RuntimeError, MemoryError) as exc:  # torch.cuda.OutOfMemoryError is a RuntimeError
        oom = _oom_answer(exc, mode)
        if oom is None:
            raise
        del exc
    finally:
        restored = snapshot.restore()
        model = None
        gc.collect()
        if mode == "cuda":
            torch.cuda.empty_cache()
    return Confirmation(measurement, oom, mode, how, setup, restored, notes)
