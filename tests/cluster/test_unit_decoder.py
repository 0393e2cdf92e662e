"""A worker notes in the manifest's load records each proposer that drafts one generation at a time
in a batch (it lacks `propose_batch`): a batched run of it is slower, never silently."""

from cluster.suite import Suite
from cluster.unit_decoder import Unit, UnitDecoder
from tasks.registry import get_task


def notices(proposer: str, batch_size: int) -> list[str]:
    suite = Suite(
        models=("tiny-random:sdar",),
        proposers=(proposer,),
        limit=2,
        temperatures=(0.0,),
        budgets=(2,),
        gen_length=8,
        block_length=8,
        batch_sizes=(batch_size,),
    )
    unit_decoder = UnitDecoder(suite)
    samples = tuple(get_task("arith").load("test", limit=2))
    unit_decoder.decode(Unit(suite.models[0], "arith", samples, tuple(suite.groups())))
    [record] = unit_decoder.loads
    return record.get("notices", [])


def test_a_proposer_without_a_batched_method_is_noted_once_per_model():
    [notice] = notices("spiffy", 2)
    assert notice == "SpiffyProposer has no propose_batch: it drafts one generation at a time in a batch"
    assert notices("confidence", 2) == []  # batches
    assert notices("spiffy", 1) == []  # nothing to batch
