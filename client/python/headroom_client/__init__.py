"""Python client of the Headroom planner, a peer of the `headroom` CLI:
does a training job fit on a GPU, on how many, at what energy?

    from headroom_client import Client
    with Client("127.0.0.1:50051") as planner:
        planner.fits("bert-base", 32, "L4")   # True

The setup keywords come from the table the core generates
(setup_words.json beside this file); the gRPC stubs (package headroom.v1)
are generated at build time (client/python/README.md), never committed.
"""

from headroom_client.answers import (Basis, BatchFigures, DeviceCosts,
                                     Estimate, FitAnswer, JobDerivation,
                                     KindBound, MemoryFigures, MinGpusStrategy,
                                     MinGpusTarget, PhaseFigures, TargetAnswer)
from headroom_client.client import Client
from headroom_client.errors import HeadroomError
from headroom_client.vocabulary import SetupKey, Vocabulary

__all__ = ["Basis", "BatchFigures", "Client", "DeviceCosts", "Estimate",
           "FitAnswer", "HeadroomError", "JobDerivation", "KindBound",
           "MemoryFigures", "MinGpusStrategy", "MinGpusTarget", "PhaseFigures",
           "SetupKey", "TargetAnswer", "Vocabulary"]
