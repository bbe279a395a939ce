"""Ray integration for jobs Weave launches (``weave serve --backend ray``).

Weave submits an admitted job to Ray with its identity, server, token and pinned nodes in the
environment (``WEAVE_*``). This module turns that environment into:

* ``WeaveJobEnv.from_env()``: the job's identity and placement, and a ready ``WeaveClient``;
* ``pinned_placement_groups(env)``: one Ray placement group per pool whose bundles require the
  custom resource of each of the job's nodes (``weave_node_r0``...), so every worker lands on
  a node Weave chose. GPU requests are fractional: the co-execution group's jobs share GPUs
  and Weave's phase gate decides which one is active;
* ``PhaseGate``: the shim that wraps a veRL-style trainer's generate and update calls in the
  gate (veRL and OpenRLHF have no hook for an external gate)::

      gate = PhaseGate(env.client(), env.job, start_iteration=env.resume_from)
      gate.wrap(trainer.actor_rollout_wg, generate="generate_sequences", update="update_actor")
      trainer.fit()   # each generate_sequences waits for rollout k, each update_actor for train k

Ray is imported lazily: the rest of ``weave_client`` needs only the standard library.
"""

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import WeaveClient


class WeaveEnvError(RuntimeError):
    pass


def _mode(value: str) -> str:
    if value not in ("disaggregated", "colocated"):
        raise WeaveEnvError(f"WEAVE_MODE={value!r}: expected 'disaggregated' or 'colocated'")
    return value


def _nodes(value: str) -> List[str]:
    return [n for n in value.split(",") if n]


@dataclass
class WeaveJobEnv:
    job: str
    uid: int
    server: str
    token: str
    rollout_nodes: List[str]
    training_nodes: List[str]
    resource_prefix: str = "weave_node_"
    resume_from: int = 0
    iterations: Optional[int] = None
    rollout_gpus_per_node: int = 8
    training_gpus_per_node: int = 8
    group: str = ""
    # ``disaggregated`` (rollout on the rollout nodes, training on the training nodes) or
    # ``colocated`` (both phases on the training nodes, the veRL way; the job decides how).
    mode: str = "disaggregated"
    # How ``pinned_placement_groups`` pinned the job's bundles: ``labels`` or ``resources``.
    pinned_by: str = ""
    extra: Dict[str, str] = field(default_factory=dict)

    @property
    def colocated(self) -> bool:
        return self.mode == "colocated"

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "WeaveJobEnv":
        e = os.environ if environ is None else environ

        def need(key):
            v = e.get(key)
            if not v:
                raise WeaveEnvError(f"{key} is not set: this job was not launched by `weave serve --backend ray` or `slurm`")
            return v

        def integer(key, default):
            v = e.get(key)
            if v in (None, ""):
                return default
            try:
                return int(v)
            except ValueError:
                raise WeaveEnvError(f"{key}={v!r}: expected an integer") from None

        return cls(
            job=need("WEAVE_JOB"),
            uid=integer("WEAVE_JOB_UID", 0),
            server=need("WEAVE_SERVER"),
            token=need("WEAVE_TOKEN"),
            rollout_nodes=_nodes(need("WEAVE_ROLLOUT_NODES")),
            training_nodes=_nodes(need("WEAVE_TRAINING_NODES")),
            resource_prefix=e.get("WEAVE_NODE_RESOURCE_PREFIX", "weave_node_"),
            resume_from=integer("WEAVE_RESUME_FROM", 0),
            iterations=integer("WEAVE_ITERATIONS", None),
            rollout_gpus_per_node=integer("WEAVE_ROLLOUT_GPUS_PER_NODE", 8),
            training_gpus_per_node=integer("WEAVE_TRAINING_GPUS_PER_NODE", 8),
            group=e.get("WEAVE_GROUP", ""),
            mode=_mode(e.get("WEAVE_MODE", "disaggregated")),
        )

    def client(self) -> WeaveClient:
        return WeaveClient(self.server, self.token)

    def resource(self, node: str) -> str:
        """The custom resource that pins work to Weave node ``node``."""
        return f"{self.resource_prefix}{node}"


#: The node label every Weave node carries in Ray (``ray start --labels weave.io/node=r0``).
NODE_LABEL = "weave.io/node"


def label_selectors_supported() -> bool:
    """Whether the installed Ray's placement groups take per-bundle label selectors (read off
    its ``placement_group`` signature, not guessed from a version number)."""
    import inspect

    from ray.util.placement_group import placement_group

    return "bundle_label_selector" in inspect.signature(placement_group).parameters


def pin_mode(requested: Optional[str] = None) -> str:
    """``labels`` (Ray's own way: bundles select nodes by the ``weave.io/node`` label) where the
    installed Ray supports it, else ``resources`` (each node's ``weave_node_<name>`` custom
    resource). ``requested`` (default: ``$WEAVE_RAY_PIN``, else ``auto``) may force either."""
    mode = requested or os.environ.get("WEAVE_RAY_PIN", "auto")
    if mode not in ("auto", "labels", "resources"):
        raise WeaveEnvError(f"WEAVE_RAY_PIN={mode!r}: expected 'auto', 'labels' or 'resources'")
    if mode == "auto":
        return "labels" if label_selectors_supported() else "resources"
    if mode == "labels" and not label_selectors_supported():
        raise WeaveEnvError("WEAVE_RAY_PIN=labels, but this Ray's placement groups take no bundle_label_selector")
    return mode


def node_selectors(nodes: List[str], workers_per_node: int = 1) -> List[Dict[str, str]]:
    """One label selector per bundle, in ``node_bundles`` order: bundle ``i * workers_per_node
    + w`` selects node ``i``."""
    return [{NODE_LABEL: n} for n in nodes for _ in range(workers_per_node)]


def node_bundles(
    env: WeaveJobEnv, nodes: List[str], gpus: float, cpus: float, workers_per_node: int = 1, by_labels: bool = False
) -> List[Dict[str, float]]:
    """``workers_per_node`` bundles per node, each requiring that node's custom resource:
    bundle ``i * workers_per_node + w`` is worker ``w`` on node ``i``. With ``by_labels`` the
    bundles carry no custom resource: ``node_selectors`` pins them."""
    if by_labels:
        return [{"GPU": gpus, "CPU": cpus} for _ in nodes for _ in range(workers_per_node)]
    return [{"GPU": gpus, "CPU": cpus, env.resource(n): 1} for n in nodes for _ in range(workers_per_node)]


def pinned_placement_groups(
    env: WeaveJobEnv,
    rollout_gpus: float = 1.0,
    training_gpus: float = 1.0,
    cpus: float = 0.5,
    workers_per_node: int = 1,
    timeout_s: float = 120.0,
    pin: Optional[str] = None,
) -> Tuple[Any, Any]:
    """Creates (and waits for) the job's rollout and training placement groups, pinned to its
    Weave nodes (``workers_per_node`` bundles per node, e.g. one per GPU, each asking for a
    fraction of a GPU). Returns ``(rollout_pg, training_pg)``; see ``node_bundles`` for the
    bundle order. A co-located job (``env.colocated``) gets one group on its training nodes,
    returned twice. Bundles are pinned as ``pin_mode(pin)`` says (label selectors where Ray has
    them); ``env.pinned_by`` records which. Raises ``TimeoutError`` naming the nodes if Ray
    cannot place them."""
    import ray
    from ray.util.placement_group import placement_group

    pgs = []
    pools = (("rollout", env.rollout_nodes, rollout_gpus), ("training", env.training_nodes, training_gpus))
    if env.colocated:
        # Co-located: one group on the training nodes serves both phases.
        pools = (("colocated", env.training_nodes, max(rollout_gpus, training_gpus)),)
    mode = pin_mode(pin)
    env.pinned_by = mode
    for pool, nodes, gpus in pools:
        name = f"weave-{env.job}-{env.uid}-{pool}"
        if mode == "labels":
            bundles = node_bundles(env, nodes, gpus, cpus, workers_per_node, by_labels=True)
            selectors = node_selectors(nodes, workers_per_node)
            pg = placement_group(bundles, strategy="PACK", name=name, bundle_label_selector=selectors)
        else:
            pg = placement_group(node_bundles(env, nodes, gpus, cpus, workers_per_node), strategy="PACK", name=name)
        pgs.append((pool, nodes, pg))
    for pool, nodes, pg in pgs:
        try:
            ray.get(pg.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"{pool} placement group on {nodes} not ready after {timeout_s} s") from None
    return pgs[0][2], pgs[-1][2]


def actor_options(pg: Any, bundle_index: int, gpus: float, cpus: float = 0.5) -> Dict[str, Any]:
    """``.options(...)`` for an actor in bundle ``bundle_index`` of ``pg``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=bundle_index)
    return {"num_gpus": gpus, "num_cpus": cpus, "scheduling_strategy": strategy}


class PhaseGate:
    """Wraps generate and update calls in Weave's phase gate: the n-th generate call is rollout
    of iteration ``start_iteration + n`` and waits for its grant; the update call after it is
    that iteration's training. Each phase reports its measured duration, its wall-clock start
    and end (``wall_start``/``wall_end``, for handoff measurements) and whatever ``meta_fn``
    returns for the call's result."""

    def __init__(
        self,
        client: WeaveClient,
        job: str,
        start_iteration: int = 0,
        meta_fn: Optional[Callable[[str, Any], Dict[str, Any]]] = None,
    ) -> None:
        self.client = client
        self.job = job
        self.iteration = start_iteration
        self.meta_fn = meta_fn

    @contextlib.contextmanager
    def _phase(self, phase):
        with self.client.phase(self.job, phase, self.iteration) as meta:
            meta["wall_start"] = time.time()
            yield meta
            meta["wall_end"] = time.time()

    def _call(self, phase, fn, args, kwargs):
        with self._phase(phase) as meta:
            out = fn(*args, **kwargs)
            if self.meta_fn is not None:
                meta.update(self.meta_fn(phase, out) or {})
        return out

    def generate(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def gated(*args: Any, **kwargs: Any) -> Any:
            return self._call("rollout", fn, args, kwargs)

        return gated

    def update(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def gated(*args: Any, **kwargs: Any) -> Any:
            out = self._call("train", fn, args, kwargs)
            self.iteration += 1
            return out

        return gated

    def wrap(
        self, obj: Any, generate: str = "generate_sequences", update: str = "update_actor", update_obj: Any = None
    ) -> Any:
        """Replaces ``obj.<generate>`` and ``(update_obj or obj).<update>`` with gated versions."""
        setattr(obj, generate, self.generate(getattr(obj, generate)))
        target = obj if update_obj is None else update_obj
        setattr(target, update, self.update(getattr(target, update)))
        return obj
