"""A transfer search on a tweaked variant starts from what its parent already measured.

An agent (or a new version of a shipped file) submits a variant with provenance.parent_id; the parent's
best configs, put into the child's space, are the child's first proposals -- at the target's own (shape, M)
too, where the child itself has nothing yet."""

from __future__ import annotations

from db.queries.variants import put_variant
from search.space import ConfigSpace
from service.search_runner import inherit, lineage, seeds_from_runs

SPACE = ConfigSpace.parse({"BLOCK_N": [16, 32, 64], "ALIGN": ["sort", "none"]})  # ALIGN: added by the child
Q_B = {"dims": {"N": 1536, "K": 1536}}
TARGET = {"shape_key": "q_b", "ms": [1], "shape": Q_B}


def test_a_parents_config_takes_the_first_value_of_a_new_parameter() -> None:
    assert inherit({"BLOCK_N": 32, "GONE": 3}, SPACE) == {"BLOCK_N": 32, "ALIGN": "sort"}


def test_seeds_come_from_the_child_and_its_ancestors() -> None:
    rows = [
        (2, "q_b", Q_B, 1, {"BLOCK_N": 16, "ALIGN": "none"}, 3.0),  # the child at its own target: resumed, not a seed
        (1, "q_b", Q_B, 1, {"BLOCK_N": 32}, 4.0),                   # the parent there: the nearest seed
        (1, "q_b", Q_B, 16, {"BLOCK_N": 64}, 9.0),
        (2, "q_b", Q_B, 16, {"BLOCK_N": 16, "ALIGN": "none"}, 5.0),  # faster than the parent at M=16: it wins
        (1, "q_b", Q_B, 4, {"BLOCK_N": 64}, 6.0),
    ]
    seeds = seeds_from_runs(rows, 2, TARGET, SPACE)
    assert [s.config for s in seeds] == [{"BLOCK_N": 32, "ALIGN": "sort"}, {"BLOCK_N": 64, "ALIGN": "sort"},
                                         {"BLOCK_N": 16, "ALIGN": "none"}]
    assert seeds[0].distance == 0


def test_lineage_follows_parent_ids(session) -> None:
    conn = session.connection()

    def put(source: str, parent: int | None) -> int:
        vid, _, _ = put_variant(conn, slot="dense_gemm", language="torch", source=source, config_space={"A": [1]},
                                constraints=[], n_points=1, author="pytest", parent_id=parent)
        return vid

    root = put("def build(c, s): pass  # v1\n", None)
    child = put("def build(c, s): pass  # v2\n", root)
    grandchild = put("def build(c, s): pass  # v3\n", child)
    other = put("def build(c, s): pass  # unrelated\n", None)
    assert lineage(session, grandchild) == [grandchild, child, root]
    assert lineage(session, other) == [other]
