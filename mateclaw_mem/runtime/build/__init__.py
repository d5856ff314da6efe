"""The builders of the composition root, one module per area (workspace, model, index, aml,
lifecycle, prompt, providers, schedule).

A builder takes explicit arguments - settings, the parts it uses, getters for parts that must stay
unbuilt until first use, `on_close` - never the container (runtime/services.py), which calls each in
one line. So a builder can be read, typed and tested alone, and none can reach a part it was not
given (tests/test_layering.py: nothing here imports runtime.services). Who reacts to whose writes is
runtime/events.py's table, not a builder's business."""
