"""Config search for kernel variants: the config-space language, strategies behind one ask/tell
interface, the driver that keeps rounds in flight, and recorded landscapes to replay without a GPU.

The service/Celery layer needs only what is exported here."""

from search.driver import BestPoint, Evaluator, ReplayEvaluator, SearchDriver, SearchProgress, ThreadPoolEvaluator
from search.landscape import Landscape, LandscapeError, LandscapeMeta, LandscapeRecord, synthetic_gemm_landscape
from search.space import Config, ConfigSpace, SpaceError
from search.strategies import (STRATEGIES, Budget, Outcome, Proposal, SearchStrategy, Strategy, TransferSeed,
                               make_strategy, nearest_seeds)

__all__ = ["STRATEGIES", "BestPoint", "Budget", "Config", "ConfigSpace", "Evaluator", "Landscape", "LandscapeError",
           "LandscapeMeta", "LandscapeRecord", "Outcome", "Proposal", "ReplayEvaluator", "SearchDriver",
           "SearchProgress", "SearchStrategy", "SpaceError", "Strategy", "ThreadPoolEvaluator", "TransferSeed",
           "make_strategy", "nearest_seeds", "synthetic_gemm_landscape"]
