"""A shipped variant's declared config space, parsed as the API parses a submission's (the same point cap), so a
test that reads a space also proves the service would accept it."""

from __future__ import annotations

from pathlib import Path

from kernels.variant_meta import declared_space
from search.space import ConfigSpace
from service.settings import Settings


def submitted_space(variant: Path) -> ConfigSpace:
    return ConfigSpace.parse(declared_space(variant.read_text()),
                             max_size=Settings.model_fields["max_config_points"].default)
