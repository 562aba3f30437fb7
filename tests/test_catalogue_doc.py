"""docs/slots.md is generated from the slot catalogue and must say what the code says."""

from __future__ import annotations

import pytest

from kernels import catalogue_doc
from kernels.catalogue import all_slots
from kernels.deployment import Deployment


def test_docs_slots_is_current() -> None:
    # a slot added, renamed or reshaped without regenerating the doc fails here
    assert catalogue_doc.DOC.read_text() == catalogue_doc.markdown(), "run python -m kernels.catalogue_doc"
    assert catalogue_doc.main(["--check"]) == 0


def test_every_slot_is_listed_with_its_shapes() -> None:
    text = catalogue_doc.markdown()
    for name, slot in all_slots().items():
        assert f"| `{name}` |" in text
        for shape in slot.shapes(Deployment()):
            assert f"`{shape.key}`" in text


def test_a_slot_beyond_design_needs_a_rationale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(all_slots()["moe_experts_shared"]), "rationale", "")
    with pytest.raises(ValueError, match="moe_experts_shared"):
        catalogue_doc.markdown()


def test_check_reports_a_stale_doc(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "slots.md"
    stale.write_text("# old\n")
    monkeypatch.setattr(catalogue_doc, "DOC", stale)
    assert catalogue_doc.main(["--check"]) == 1
