"""Draft-tree validation: truncation, pruning of useless nodes, refusal of malformed ones."""

import pytest
import torch

from harness.decoding import DraftNode, DraftTree, Transition, prepare

MASK = 99


def t(*pairs: tuple[int, int]) -> Transition:
    return Transition(tuple(p for p, _ in pairs), tuple(v for _, v in pairs))


def root(size: int = 4) -> torch.Tensor:
    return torch.full((size,), MASK)


def test_empty_tree_is_the_root_alone():
    prepared = prepare(DraftTree(), root(), MASK, budget=8)
    assert prepared.states.shape == (1, 4) and prepared.children == {}


def test_chain_and_branches_get_rows_and_states():
    tree = DraftTree((DraftNode(0, t((0, 1))), DraftNode(1, t((2, 3))), DraftNode(0, t((1, 5)))))
    prepared = prepare(tree, root(), MASK, budget=8)
    m = MASK
    assert prepared.states.tolist() == [[m, m, m, m], [1, m, m, m], [1, m, 3, m], [m, 5, m, m]]
    assert prepared.child(0, t((0, 1))) == 1 and prepared.child(1, t((2, 3))) == 2
    assert prepared.child(0, t((1, 5))) == 3 and prepared.child(0, t((1, 6))) is None
    assert prepared.child(1, t((1, 5))) is None  # same transition, other parent


def test_budget_truncates_and_descendants_of_dropped_nodes_go_too():
    tree = DraftTree.chain([t((0, 1)), t((1, 1)), t((2, 1))])
    assert prepare(tree, root(), MASK, budget=2).states.shape[0] == 3
    assert prepare(tree, root(), MASK, budget=0).states.shape[0] == 1
    # a node that fills the block is dropped (the parent's bonus commit does the same), so is its child
    full = DraftTree((DraftNode(0, t((0, 1), (1, 1), (2, 1), (3, 1))), DraftNode(1, t((0, 2)))))
    assert prepare(full, root(), MASK, budget=8).states.shape[0] == 1


def test_duplicate_siblings_are_evaluated_once():
    tree = DraftTree((DraftNode(0, t((0, 1))), DraftNode(0, t((0, 1))), DraftNode(2, t((1, 1)))))
    prepared = prepare(tree, root(), MASK, budget=8)
    assert prepared.states.shape[0] == 2  # the duplicate and its child are dropped


@pytest.mark.parametrize(
    "node",
    [
        DraftNode(1, t((0, 1))),  # parent is itself
        DraftNode(-1, t((0, 1))),
        DraftNode(0, Transition((), ())),  # commits nothing
        DraftNode(0, t((4, 1))),  # crosses the block boundary
        DraftNode(0, t((2, 1))),  # position 2 is not masked in the root
    ],
)
def test_malformed_nodes_are_refused(node):
    state = root()
    state[2] = 7
    with pytest.raises(ValueError):
        prepare(DraftTree((node,)), state, MASK, budget=4)
