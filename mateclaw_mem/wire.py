"""The base of every request, response and model-answer schema (pydantic at the boundaries).

`defer_build`: a model's validator and serializer are built the first time it validates or
dumps, not when its class is defined. The daemon defines ~180 of them and FastAPI wraps each route's
models once more; building them all at import was ~200 ms of CPU before `/health` could answer,
for routes most runs never call. The build is pydantic's own, per model, without our locks; its
first use costs a millisecond or two. `/openapi.json` builds them all (the schema suite reads it).
"""

from __future__ import annotations

import warnings

from pydantic import BaseModel, ConfigDict

# FastAPI wraps a route's parameters as `Annotated[type, Field(alias=...)]` and silences pydantic's
# "has no effect in the context it was used" warning around its own build. A deferred build runs
# outside that block, so the same silence is kept here, for that message only.
warnings.filterwarnings("ignore", message=r"The '\w+' attribute with value .* was provided to the `Field\(\)` "
                        r"function, which has no effect", module=r"pydantic\.")


class Wire(BaseModel):
    model_config = ConfigDict(defer_build=True)
