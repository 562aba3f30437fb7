"""A fault planted in a kernel module for the tests of checks beyond the measured batch size."""

# Appended to a module with a build(config, shape): right at every M but 3, where it leaves its last output row at
# zero (a masking bug of the kind a tile bound gives).
WRONG_AT_3 = """

_right_build = build


def build(config, shape, *args, **kwargs):
    fn = _right_build(config, shape, *args, **kwargs)
    if shape["M"] != 3:
        return fn

    def wrong(**kw):
        fn(**kw)
        kw["out"][-1].zero_()
    return wrong
"""
