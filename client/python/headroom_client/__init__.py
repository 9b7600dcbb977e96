"""Python client of the Headroom planner: does a training job fit on a GPU?

    from headroom_client import Client
    with Client("127.0.0.1:50051") as planner:
        planner.fits("bert-base", 32, "L4")   # True

The gRPC stubs (package headroom.v1) are generated at build time beside
this package (client/python/README.md); they are never committed.
"""

from headroom_client.client import (Basis, BatchFigures, Client, DeviceCosts,
                                    Estimate, FitAnswer, HeadroomError,
                                    KindBound, MemoryFigures, PhaseFigures,
                                    TargetAnswer)

__all__ = ["Basis", "BatchFigures", "Client", "DeviceCosts", "Estimate",
           "FitAnswer", "HeadroomError", "KindBound", "MemoryFigures",
           "PhaseFigures", "TargetAnswer"]
