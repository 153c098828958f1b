"""Trace export. The code emits spans through the OpenTelemetry API only (a no-op without an
SDK); a process exports them over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the
``otel`` extra is installed (``pip install 'realtime-dispatch[otel]'``). The exporter reads the
standard ``OTEL_*`` variables itself (endpoint, headers, timeout)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from opentelemetry import trace

from realtime_dispatch.errors import ConfigurationError

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"


def configure_tracing(environ: Mapping[str, str], service_name: str) -> Callable[[], None] | None:
    """Install an SDK tracer provider with an OTLP exporter if the endpoint is set.

    Returns the provider's shutdown (flushes pending spans), or None when tracing stays off.
    """
    if not environ.get(ENDPOINT_VARIABLE):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
    except ImportError:
        raise ConfigurationError(
            ENDPOINT_VARIABLE,
            "is set but the OpenTelemetry SDK is missing: pip install 'realtime-dispatch[otel]'",
        ) from None
    name = environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider.shutdown
