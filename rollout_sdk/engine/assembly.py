"""The engine of one runtime, assembled once: each collaborator built once and shared.

The local server and ``create_app`` (``rollout_sdk.http.app.local_engine``), the Lambda
composition root (``rollout_sdk.aws.runtime``) and ``rollout-sdk redrive`` each build one
:class:`Engine`. Delivery, settlement and recovery need only the store, the TrainGate client and
the vault; the worker exists only where an agent loop runs. Every collaborator is complete when
built: nothing is wired in afterwards (the recovery's hand-off included).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rollout_sdk.engine.cancels import CancelSignals
from rollout_sdk.engine.costs import NO_COSTS, CostLedger
from rollout_sdk.engine.delivery import Delivery
from rollout_sdk.engine.lease import Leases
from rollout_sdk.engine.progress import StatusBoard
from rollout_sdk.engine.recovery import HandOff, Recovery
from rollout_sdk.engine.settlement import Settlement
from rollout_sdk.engine.worker import RolloutWorker
from rollout_sdk.telemetry import NO_TELEMETRY

if TYPE_CHECKING:
    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.dispatch.base import Dispatcher
    from rollout_sdk.engine.workflows import WorkflowRunner, Workflows
    from rollout_sdk.settings import RolloutSettings
    from rollout_sdk.store.base import Store
    from rollout_sdk.telemetry import Telemetry
    from rollout_sdk.traingate.client import TrainGateClient
    from rollout_sdk.vault import KeyVault

#: Builds the dispatcher that runs the engine's own worker (the local server's in-process one).
DispatcherFor = Callable[[RolloutWorker], "Dispatcher"]


@dataclass(frozen=True)
class Engine:
    """What runs rollouts and reports them, over one store and one TrainGate client."""

    store: Store
    client: TrainGateClient
    settings: RolloutSettings
    vault: KeyVault | None
    leases: Leases
    delivery: Delivery
    settlement: Settlement
    recovery: Recovery
    cancels: CancelSignals
    #: None where no agent loop runs (``rollout-sdk redrive``).
    worker: RolloutWorker | None
    clock: Callable[[], float]
    #: Where the engine's metrics and spans go (the client's own is given to the client).
    telemetry: Telemetry = NO_TELEMETRY
    #: The cost estimate's figures (on Lambda; nothing on the local server).
    costs: CostLedger = NO_COSTS
    #: The dispatcher that runs this engine's worker, when the engine built it (locally; on
    #: Lambda the hand-off invokes another function, and the runtime holds that dispatcher).
    dispatcher: Dispatcher | None = None
    #: Pulled (0.3.8) rollouts' phases and changes, heard by the polls waiting here.
    board: StatusBoard = field(default_factory=StatusBoard)
    #: The osmosis-ai 0.3.8 workflow (and grader) the worker runs, if any.
    workflows: Workflows | None = None
    #: This runtime's process: a new id each start (``/health``'s ``process_id``, which
    #: RolloutClient.wait_idle takes a change of for a restart; 0.3.8's RolloutContext has it).
    process_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @classmethod
    def build(
        cls,
        *,
        store: Store,
        client: TrainGateClient,
        settings: RolloutSettings,
        vault: KeyVault | None = None,
        agent_loop: RolloutAgentLoop | None = None,
        debug_dir: str | Path | None = None,
        clock: Callable[[], float] = time.time,
        telemetry: Telemetry = NO_TELEMETRY,
        costs: CostLedger = NO_COSTS,
        dispatcher: DispatcherFor | None = None,
        hand_off: HandOff | None = None,
        workflows: Workflows | None = None,
        process_id: str | None = None,
    ) -> Engine:
        """Build each collaborator once; the worker only when ``agent_loop`` is given.
        ``telemetry`` gets every transition's metrics (the TrainGate client takes its own, so
        that it can be built before the engine: give it the same one); ``costs`` the cost
        estimate's figures (on Lambda; nothing on the local server).

        The recovery re-hands-off a rollout whose extra hand-off failed through ``dispatcher``,
        built here from the engine's worker (the engine keeps it), or through ``hand_off`` (on
        Lambda: the runtime's dispatcher, built when first needed); with neither
        (``rollout-sdk redrive``) it leaves such rollouts to a recoverer that has one. Raises
        ValueError for both, or for ``dispatcher`` without ``agent_loop``.
        """
        # One piece on purpose (over 80 lines): this is the composition root, where every
        # collaborator gets the same store, clock, telemetry and costs; split up, the pieces
        # would have to pass those along again and could disagree on them.
        if dispatcher is not None and hand_off is not None:
            raise ValueError("Engine.build: pass dispatcher or hand_off, not both")
        if dispatcher is not None and agent_loop is None:
            raise ValueError("Engine.build: a dispatcher runs the engine's worker: give agent_loop")
        leases = Leases(store, settings.kit, clock=clock)
        board = StatusBoard()
        # A new one each start, unless the composition has one that outlives a process (a
        # Lambda deployment's, the same in each of its environments).
        process_id = process_id or str(uuid.uuid4())
        delivery = Delivery(
            store,
            client,
            settings,
            leases=leases,
            vault=vault,
            clock=clock,
            telemetry=telemetry,
            costs=costs,
            board=board,
        )
        settlement = Settlement(
            store,
            delivery,
            settings,
            leases=leases,
            vault=vault,
            clock=clock,
            telemetry=telemetry,
            costs=costs,
        )
        cancels = CancelSignals()
        worker = (
            RolloutWorker(
                agent_loop,
                store=store,
                client=client,
                settings=settings,
                leases=leases,
                delivery=delivery,
                settlement=settlement,
                cancels=cancels,
                debug_dir=debug_dir,
                clock=clock,
                telemetry=telemetry,
                costs=costs,
                workflows=_runner(workflows, board, clock, process_id),
            )
            if agent_loop is not None
            else None
        )
        runs = dispatcher(worker) if dispatcher is not None and worker is not None else None
        return cls(
            store=store,
            client=client,
            settings=settings,
            vault=vault,
            leases=leases,
            delivery=delivery,
            settlement=settlement,
            recovery=Recovery(
                settlement,
                store=store,
                clock=clock,
                hand_off=runs.dispatch if runs is not None else hand_off,
                telemetry=telemetry,
                costs=costs,
            ),
            cancels=cancels,
            worker=worker,
            clock=clock,
            telemetry=telemetry,
            costs=costs,
            dispatcher=runs,
            board=board,
            workflows=workflows,
            process_id=process_id,
        )

    def require_worker(self) -> RolloutWorker:
        """The worker; a RuntimeError when this engine was built without an agent loop."""
        if self.worker is None:
            raise RuntimeError("this engine was built without an agent loop: it runs no rollouts")
        return self.worker


def _runner(
    workflows: Workflows | None, board: StatusBoard, clock: Callable[[], float], process_id: str
) -> WorkflowRunner | None:
    """The worker's 0.3.8 runner, where a workflow is served (its modules loaded only then)."""
    if workflows is None:
        return None
    from rollout_sdk.engine.workflows import WorkflowRunner

    return WorkflowRunner(workflows, board, clock=clock, process_id=process_id)
