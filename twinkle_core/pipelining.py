"""Pipeline parallel inside Lightning: one algorithm's network cut into stages over the ``pipeline_parallel``
dimension of a device mesh, trained with ``torch.distributed.pipelining``'s 1F1B schedules.

``Algorithm.configure_model`` builds a ``Pipeline`` when the mesh has more than one pipeline rank. It cuts the
network with ``Algorithm.pipeline_stages`` into ``stages_per_rank × ranks`` consecutive parts and keeps this
rank's — rank ``r`` holds parts ``r, r + ranks, ...`` (torchtitan's "loop" order) — so that a rank with two parts
runs the interleaved 1F1B schedule, and one with a single part plain 1F1B. Modules of other ranks' parts are
dropped from the network (each rank holds only its share of the weights, under their names in the whole
network). Weights several ranks' parts hold (an embedding tied to the output layer) stay on each of them and
their gradients are summed between those ranks before every optimizer step, so the copies stay one weight.

Every rank of one pipeline reads the same batch; a training step splits it into micro-batches
(``twinkle_core.parallel.pipeline_micro_batches``), runs the schedule, and returns the batch's loss (the
algorithm's ``pipeline_batch`` says how: its inputs, targets, and a loss per micro-batch that sums to the batch's
loss).
A forward outside training (validation, generation) runs the stages in order and hands the last one's output to
every rank of the pipeline.

Checkpoints are sharded folders (``engine.sharded``: each rank writes its stages' shards; ``named_groups`` names
the whole network's parameters in the optimizers' groups) or whole files: ``full_state_dict`` /
``full_optimizer_state`` gather every rank's share on global rank 0 in the layout a one-process run writes
(optimizer states keyed by the whole network's parameter order), and ``load_state_dict`` /
``load_optimizer_state`` take such a file back, each rank keeping its share — so a run moves between layouts (one
process, tensor parallel, pipeline) through its checkpoints.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from twinkle_core.errors import TwinkleError
from twinkle_core.parallel import pipeline_micro_batches, tied_names

PIPELINE_DIMENSION = "pipeline_parallel"
"""The name of the device mesh's pipeline dimension."""


def pipeline_ranks(mesh: Any) -> int:
    """The pipeline degree of a device mesh (1 when it has no ``pipeline_parallel`` dimension)."""
    names = getattr(mesh, "mesh_dim_names", None) or ()
    return int(mesh[PIPELINE_DIMENSION].size()) if PIPELINE_DIMENSION in names else 1


class Pipeline:
    """This rank's stages of an algorithm's network, and the schedule that trains them (see the module)."""

    def __init__(self, algorithm: nn.Module, mesh: Any, wrap: Callable[[list[nn.Module]], None] | None = None
                 ) -> None:
        """Cut ``algorithm``'s network for ``mesh``'s pipeline dimension and keep this rank's parts.

        Args:
            algorithm: the ``Algorithm`` (its ``model`` already split by tensor parallel, if at all).
            mesh: the job's device mesh with a ``pipeline_parallel`` dimension.
            wrap: called with this rank's parts once the rest is dropped (FSDP2 shards them there).

        Raises:
            TwinkleError: the network cannot be cut into as many stages as there are pipeline ranks.
        """
        pipe = mesh[PIPELINE_DIMENSION]
        self.group = pipe.get_group()
        self.ranks, self.rank = pipe.size(), pipe.get_local_rank()
        self.globals = dist.get_process_group_ranks(self.group)  # global rank of each pipeline rank
        self.algorithm = algorithm
        parts, self.per_rank = _cut(algorithm, self.ranks)
        self.total = len(parts)
        self.indices = list(range(self.rank, self.total, self.ranks))
        self.parts = [parts[i] for i in self.indices]
        self.names = [name for name, p in algorithm.named_parameters() if p.requires_grad]
        self.aliases = {name: names[0] for names in tied_names(algorithm) for name in names[1:]}
        holders: dict[int, set[int]] = {}
        for index, part in enumerate(parts):
            for parameter in part.parameters():
                holders.setdefault(id(parameter), set()).add(index % self.ranks)
        mine = {id(t) for part in self.parts for t in (*part.parameters(), *part.buffers())}
        known: dict[int, list[str]] = {}
        for name, parameter in algorithm.named_parameters(remove_duplicate=False):
            known.setdefault(id(parameter), []).append(name)
        # weights several ranks hold, by their names: FSDP2 replaces the parameters it shards, names stay
        shared = {tuple(known[key]): sorted(owners) for key, owners in holders.items()
                  if len(owners) > 1 and key in known}
        _drop_others(algorithm.model, mine)
        if wrap is not None:
            wrap(self.parts)
        held = {id(p) for part in self.parts for p in part.parameters()}
        for names in known.values():  # a module outside this rank's parts kept the tied weight FSDP2 replaced
            if len(names) > 1:
                _tie(algorithm, names, held)
        self.tied = _tied_groups(algorithm, shared, held, mesh)
        self._schedules: dict[tuple[Any, ...], Any] = {}
        self._loss: Callable[[Any, torch.Tensor], torch.Tensor] | None = None

    @property
    def first(self) -> bool:
        """Whether this rank holds the first stage."""
        return self.rank == 0

    @property
    def last(self) -> bool:
        """Whether this rank holds the last stage."""
        return (self.total - 1) % self.ranks == self.rank

    # --------------------------------------------------------------------- training
    def train_step(self, inputs: tuple[torch.Tensor, ...], target: torch.Tensor,
                   loss: Callable[[Any, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Forward and backward of one batch through the schedule; the batch's loss on every pipeline rank
        (the sum of ``loss`` over the micro-batches, computed on the last stage)."""
        schedule = self._schedule(inputs)
        self._loss = loss
        losses: list[torch.Tensor] = []
        if self.first:
            schedule.step(*inputs, losses=losses, return_outputs=False)
        elif self.last:
            schedule.step(target=target, losses=losses, return_outputs=False)
        else:
            schedule.step(return_outputs=False)
        device = inputs[0].device
        value = torch.zeros((), device=device)
        for part in losses:
            value += _whole(part).detach().float().to(device)
        dist.broadcast(value, src=self.globals[(self.total - 1) % self.ranks], group=self.group)
        return value

    def _schedule(self, inputs: tuple[torch.Tensor, ...]) -> Any:
        """The schedule for batches shaped like ``inputs`` (stages learn their shapes from the first batch):
        1F1B — interleaved when this rank holds two stages — or, for a batch too small to fill it (an epoch's
        last), all forwards then all backwards (GPipe; looped over the stages when interleaved)."""
        from torch.distributed.pipelining import (
            PipelineStage,
            Schedule1F1B,
            ScheduleGPipe,
            ScheduleInterleaved1F1B,
            ScheduleLoopedBFS,
        )

        key = tuple((tuple(t.shape), t.dtype) for t in inputs)
        if key not in self._schedules:
            count, filled = self.micro_batch_count(int(inputs[0].shape[0]))
            device = inputs[0].device
            stages = [PipelineStage(part, index, self.total, device, group=self.group)
                      for part, index in zip(self.parts, self.indices)]
            options = {"loss_fn": self._micro_loss, "scale_grads": False}
            if len(stages) > 1:
                kind: Any = ScheduleInterleaved1F1B if filled else ScheduleLoopedBFS
                self._schedules[key] = kind(stages, count, **options)
            else:
                self._schedules[key] = (Schedule1F1B if filled else ScheduleGPipe)(stages[0], count, **options)
        return self._schedules[key]

    def micro_batch_count(self, batch_size: int) -> tuple[int, bool]:
        """Micro-batches per batch, and whether they fill a 1F1B schedule: the most, up to 4 per pipeline rank,
        that divide ``batch_size`` into equal parts and number at least the ranks (a multiple of them when
        interleaved); else, for a batch too small for that, the most that divide it (run GPipe-style)."""
        return pipeline_micro_batches(batch_size, self.ranks, self.per_rank)

    def _micro_loss(self, output: Any, target: torch.Tensor) -> torch.Tensor:
        assert self._loss is not None
        return self._loss(output, target)

    def sum_tied_gradients(self) -> None:
        """Sum the gradients of weights held by several ranks' stages, so every copy steps alike — once per
        optimizer step, after the batches it accumulates (``twinkle_core.engine.pipelined.PipelineGradients``)."""
        for parameter, group in self.tied:
            grad = parameter.grad
            if grad is None:
                grad = parameter.grad = torch.zeros_like(parameter)
            if hasattr(grad, "placements") and grad.placements != parameter.placements:  # an embedding's, say
                grad = parameter.grad = grad.redistribute(parameter.device_mesh, parameter.placements)
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            dist.all_reduce(local, group=group)

    def gradient_norm(self, parameters: list[torch.Tensor]) -> torch.Tensor:
        """The 2-norm of every stage's gradients together (a weight held by several stages counted once)."""
        tied = {id(p) for p, _ in self.tied}
        total = torch.zeros((), dtype=torch.float64, device=self.algorithm.device)
        for p in parameters:
            if p.grad is None or (id(p) in tied and not self.first):
                continue
            total += _whole(p.grad).detach().double().pow(2).sum()
        dist.all_reduce(total, group=self.group)
        return total.sqrt()

    def clip_gradients(self, parameters: list[torch.Tensor], max_norm: float) -> None:
        """Scale every stage's gradients so that their norm together is at most ``max_norm``."""
        norm = float(self.gradient_norm(parameters))
        if math.isfinite(norm) and norm > max_norm:
            for p in parameters:
                if p.grad is not None:
                    p.grad.mul_(max_norm / (norm + 1e-6))

    # ---------------------------------------------------------------------- forward
    @torch.no_grad()
    def forward(self, *inputs: torch.Tensor) -> Any:
        """The network's output for ``inputs`` (every rank of the pipeline passes the same), on every rank:
        the stages run in order, each handing its output to the next stage's rank."""
        values: Any = inputs
        device = inputs[0].device
        for index in range(self.total):
            owner = index % self.ranks
            if owner == self.rank:
                out = self.parts[self.indices.index(index)](*values)
                if index == self.total - 1:
                    out = _whole(out)  # split by tensor parallel: whole before it is handed on
                values = tuple(t.cpu() for t in (out if isinstance(out, tuple) else (out,)))
            box = [values if owner == self.rank else None]
            dist.broadcast_object_list(box, src=self.globals[owner], group=self.group)
            values = tuple(t.to(device) for t in box[0])
        return values[0] if len(values) == 1 else values

    # ------------------------------------------------------------------ checkpoints
    def full_state_dict(self) -> dict[str, Any]:
        """The whole network's state (the algorithm's ``state_dict`` keys) on global rank 0, on the CPU; an
        empty dict elsewhere. Every rank of the job must call it."""
        state = {}
        for name, value in self.algorithm.state_dict().items():
            if value.is_meta:
                continue
            state[name] = _whole(value).detach().cpu()
        return _merge_on_zero(state if self._speaks() else {})

    def full_optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """``optimizer``'s state as a one-process run's optimizer writes it (keyed by the whole network's
        parameter order) on global rank 0; an empty dict elsewhere. Every rank must call it."""
        names = self._names_of(optimizer)
        local = optimizer.state_dict()
        state: dict[str, Any] = {}
        for index, values in local["state"].items():
            state[names[index]] = {k: _whole(v).detach().cpu() if torch.is_tensor(v) else v
                                   for k, v in values.items()}
        groups = [{**_settings(g), "params": [names[i] for i in g["params"]]} for g in local["param_groups"]]
        shares = _gather_on_zero({"state": state, "groups": groups} if self._speaks() else None)
        if shares is None:
            return {}
        order = {name: i for i, name in enumerate(self.names)}
        merged: dict[int, Any] = {}
        params: list[set[int]] = [set() for _ in groups]
        for share in (s for s in shares if s):
            for name, values in share["state"].items():
                merged[order[name]] = values
            for slot, group in enumerate(share["groups"]):
                params[slot].update(order[name] for name in group["params"])
        return {"state": dict(sorted(merged.items())),
                "param_groups": [{**_settings(g), "params": sorted(p)} for g, p in zip(groups, params)]}

    def named_groups(self, optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
        """``optimizer``'s parameter groups over the whole network — every rank's parameters, by name, in the whole
        network's order — on every rank. Every rank must call it."""
        names = self._names_of(optimizer)
        groups, start = [], 0
        for group in optimizer.param_groups:
            groups.append({**_settings(group), "params": names[start:start + len(group["params"])]})
            start += len(group["params"])
        shares: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(shares, groups)
        order = {name: i for i, name in enumerate(self.names)}
        merged: list[set[str]] = [set() for _ in groups]
        for share in shares:
            for slot, group in enumerate(share):
                merged[slot].update(group["params"])
        return [{**_settings(g), "params": sorted(p, key=order.__getitem__)} for g, p in zip(groups, merged)]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a whole network's state (a checkpoint's ``state_dict``): each rank takes its stages' share.

        Raises:
            TwinkleError: the state lacks a weight this rank's stages hold.
        """
        from torch.distributed.tensor import DTensor, distribute_tensor

        own = self.algorithm.state_dict()
        missing = [k for k, v in own.items() if not v.is_meta and k not in state]
        if missing:
            raise TwinkleError(f"the checkpoint lacks {len(missing)} weight(s) of this stage, e.g. {missing[:3]}")
        chosen = {}
        for key, value in own.items():
            if value.is_meta:
                continue
            saved = state[key].to(value.device if not isinstance(value, DTensor) else value.to_local().device)
            if isinstance(value, DTensor):
                saved = distribute_tensor(saved.to(value.dtype), value.device_mesh, value.placements,
                                          src_data_rank=None)
            chosen[key] = saved
        self.algorithm.load_state_dict(chosen, strict=False)

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
        """Load a one-process run's optimizer state (``full_optimizer_state``'s layout) into ``optimizer``
        over this rank's stages."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        by_name = {self.names[index]: values for index, values in saved["state"].items()}
        names = self._names_of(optimizer)
        parameters = [p for g in optimizer.param_groups for p in g["params"]]
        state: dict[int, Any] = {}
        for index, (name, parameter) in enumerate(zip(names, parameters)):
            if name not in by_name:
                continue
            values = {}
            for key, value in by_name[name].items():
                if torch.is_tensor(value) and isinstance(parameter, DTensor) and value.shape == parameter.shape:
                    value = distribute_tensor(value.to(parameter.dtype), parameter.device_mesh, parameter.placements,
                                              src_data_rank=None)
                values[key] = value
            state[index] = values
        local = optimizer.state_dict()
        groups = [{**_settings(s), "params": g["params"]} for g, s in zip(local["param_groups"], saved["param_groups"])]
        optimizer.load_state_dict({"state": state, "param_groups": groups})

    def _names_of(self, optimizer: torch.optim.Optimizer) -> list[str]:
        """The whole network's name of each of ``optimizer``'s parameters, in its order."""
        by_id = {id(p): self.aliases.get(name, name) for name, p in self.algorithm.named_parameters()}
        return [by_id[id(p)] for g in optimizer.param_groups for p in g["params"]]

    def _speaks(self) -> bool:
        """Whether this rank speaks for its stages (the first rank of each of its other mesh dimensions)."""
        mesh = self.algorithm.device_mesh
        names = mesh.mesh_dim_names or ()
        return all(mesh[name].get_local_rank() == 0 for name in names if name != PIPELINE_DIMENSION)


def _cut(algorithm: Any, ranks: int) -> tuple[list[nn.Module], int]:
    """The network's parts: two per rank where it cuts that finely (interleaved 1F1B), else one.

    Raises:
        TwinkleError: it cannot be cut into ``ranks`` parts.
    """
    try:
        return list(algorithm.pipeline_stages(2 * ranks)), 2
    except TwinkleError:
        return list(algorithm.pipeline_stages(ranks)), 1


def _whole(value: Any) -> Any:
    """A tensor split over a device mesh (``DTensor``) gathered whole; anything else as it is."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value


def _settings(group: dict[str, Any]) -> dict[str, Any]:
    """An optimizer parameter group's settings (lr, betas, ...) without its parameters."""
    return {k: v for k, v in group.items() if k != "params"}


def _drop_others(module: nn.Module, keep: set[int]) -> None:
    """Replace every submodule holding none of the tensors in ``keep`` (by id) with an empty module."""
    for name, child in list(module.named_children()):
        tensors = [id(t) for t in (*child.parameters(), *child.buffers())]
        if not tensors:
            continue
        if not keep.intersection(tensors):
            setattr(module, name, nn.Module())
        else:
            _drop_others(child, keep)


def _tied_groups(algorithm: nn.Module, shared: dict[tuple[str, ...], list[int]], held: set[int], mesh: Any
                 ) -> list[tuple[torch.Tensor, Any]]:
    """For each weight several pipeline ranks hold (by its names in the whole network): this rank's copy, as it
    is now (sharded by FSDP2 or not), and the process group of its holders (one group per pipeline of the mesh;
    every rank creates every group, in the same order)."""
    if not shared:
        return []
    dims = list(mesh.mesh_dim_names)
    axis = dims.index(PIPELINE_DIMENSION)
    grid = mesh.mesh.movedim(axis, -1).reshape(-1, mesh.mesh.shape[axis])  # each row: one pipeline's ranks
    me = dist.get_rank()
    groups: dict[tuple[int, ...], Any] = {}
    for owners in sorted({tuple(v) for v in shared.values()}):
        for row in grid.tolist():
            group = dist.new_group([row[i] for i in owners])
            if me in row:
                groups[owners] = group
    out = []
    for names, owners in shared.items():
        parameter = _held(algorithm, names, held)
        group = groups.get(tuple(owners))
        if parameter is not None and group is not None and me in dist.get_process_group_ranks(group):
            out.append((parameter, group))
    return out


def _held(module: nn.Module, names: tuple[str, ...] | list[str], held: set[int]) -> torch.Tensor | None:
    """The parameter this rank's stages hold (its id in ``held``) under one of ``names``, else ``None``."""
    for name in names:
        try:
            parameter = module.get_parameter(name)
        except AttributeError:
            continue
        if id(parameter) in held:
            return parameter
    return None


def _tie(module: nn.Module, names: list[str], held: set[int]) -> None:
    """Make every one of ``names`` still in ``module`` the one parameter of theirs this rank's stages hold."""
    kept = _held(module, names, held)
    if kept is None:
        return
    for name in names:
        owner, _, leaf = name.rpartition(".")
        try:
            holder = module.get_submodule(owner)
        except AttributeError:
            continue
        if isinstance(getattr(holder, leaf, None), torch.Tensor):
            setattr(holder, leaf, kept)


def _gather_on_zero(value: Any) -> list[Any] | None:
    """Every rank's ``value`` in a list on global rank 0 (``None`` elsewhere)."""
    box: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(value, box, dst=0)
    return box


def _merge_on_zero(state: dict[str, Any]) -> dict[str, Any]:
    """Every rank's share of a state merged on global rank 0 (an empty dict elsewhere)."""
    shares = _gather_on_zero(state)
    merged: dict[str, Any] = {}
    for share in shares or []:
        merged.update(share)
    return merged
