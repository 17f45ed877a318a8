"""The model layer: one `Model` interface, several providers chosen by a spec string.

    from medpanel.models import build_model
    model = build_model("openai:gpt-4o-mini")
    reply = await model.complete([{"role": "user", "content": "Hi"}])
"""

from medpanel.models.base import Generation, Image, Message, Model, Reply, Request, Usage
from medpanel.models.registry import build_model, parse_spec, provider_names
from medpanel.models.runtime import Runtime

__all__ = [
    "Generation",
    "Image",
    "Message",
    "Model",
    "Reply",
    "Request",
    "Runtime",
    "Usage",
    "build_model",
    "parse_spec",
    "provider_names",
]
