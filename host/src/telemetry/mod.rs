//! OpenTelemetry: spans and metrics under the GenAI semantic conventions, exported over OTLP
//! to whatever collector the operator names (Phoenix, Langfuse, Jaeger, an OTel Collector).
//!
//! Off by default. [`Settings::resolve`] reads the standard `OTEL_*` variables over the
//! operator's `[otel]` table; [`Telemetry::start`] sets up the exporter and gives the
//! `tracing` layer the program installs; [`Telemetry::shutdown`] sends what is queued, within
//! a bound, before the process exits.
//!
//! The code that emits spans uses [`GenAiSpan`] and never the OTel crates: `execute_tool`
//! (the executor, for every front end), `invoke_agent` and `chat` (the agent runtime). When
//! export is off a `GenAiSpan` is a disabled `tracing` span and costs next to nothing.
//!
//! Trace context crosses processes as a [`TraceParent`]: parsed once where it arrives (an
//! HTTP header, MCP's `_meta`, the `TRACEPARENT` variable toolbox was started with), given
//! to the span as its parent, and handed on to children as `TRACEPARENT`/`TRACESTATE`
//! ([`child_env`]).
//!
//! What is never exported: arguments and results (unless `[otel] record_content = true`, and
//! then cut to `content_max_chars` with every secret toolbox holds replaced by
//! `<redacted>`), model messages, prompts, file contents, and `tracing` events (logs).

mod export;
pub mod semconv;
mod settings;

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, Context as _, Result};
use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;
use toolbox_core::TraceParent;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use settings::{Protocol, Sampling, Settings};

use export::{Counted, CountedMetrics, Counts, Gate, OwnRuntime};

/// The `tracing` target of every span toolbox exports; the exporting layer sees nothing else
/// (no events, no other crate's spans).
pub const SPAN_TARGET: &str = "gen_ai";

/// What the process-wide exporter does, once started.
struct Active {
    /// Where spans go and how (`http://…/v1/traces over http/protobuf`), for `toolbox doctor`.
    target: String,
    counts: Arc<Counts>,
    record_content: bool,
    content_max_chars: usize,
    tool_duration: Histogram<f64>,
    agent_duration: Histogram<f64>,
}

static ACTIVE: OnceLock<Active> = OnceLock::new();
/// The `TRACEPARENT` toolbox itself was started with (by a traced parent process).
static PROCESS_PARENT: OnceLock<Option<TraceParent>> = OnceLock::new();

/// The exporter of this process. Keep it until the end, then [`shutdown`](Self::shutdown).
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    meter_provider: Option<SdkMeterProvider>,
    settings: Settings,
}

/// What happened to the spans so far: a figure a person can act on when a collector is slow
/// or gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct ExportCounts {
    /// Spans finished and handed to the exporter (sampled ones).
    pub spans: u64,
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans dropped because the queue was full (the collector is slow or gone).
    pub dropped: u64,
    /// Spans in batches the collector did not take (refused, unreachable, timed out).
    pub failed: u64,
    /// Metric exports that failed.
    pub metric_exports_failed: u64,
    /// Spans queued or being sent: after [`Telemetry::shutdown`], those it had no time to
    /// send (lost too).
    pub unsent: u64,
}

impl ExportCounts {
    /// Spans lost, for any reason (after shutdown).
    pub fn lost(&self) -> u64 {
        self.dropped + self.failed + self.unsent
    }
}

/// The counts of the running exporter; `None` when export is off.
pub fn counts() -> Option<ExportCounts> {
    ACTIVE.get().map(|a| read_counts(&a.counts))
}

fn read_counts(c: &Counts) -> ExportCounts {
    ExportCounts {
        spans: c.ended.load(Ordering::Relaxed),
        unsent: c.in_flight.load(Ordering::Relaxed) as u64,
        exported: c.exported.load(Ordering::Relaxed),
        dropped: c.dropped.load(Ordering::Relaxed),
        failed: c.failed.load(Ordering::Relaxed),
        metric_exports_failed: c.metric_exports_failed.load(Ordering::Relaxed),
    }
}

/// Whether spans are being exported in this process.
pub fn active() -> bool {
    ACTIVE.get().is_some()
}

/// Where spans are exported to, and over which protocol; `None` when export is off.
pub fn target() -> Option<&'static str> {
    ACTIVE.get().map(|a| a.target.as_str())
}

impl Telemetry {
    /// Starts the exporter: builds the OTLP exporters, the batch processor, the metrics
    /// reader, and sets the global meter provider. Fails with the reason (a bad endpoint),
    /// never later on a call. Only one may run per process.
    pub fn start(settings: Settings) -> Result<Telemetry> {
        // reqwest is built with `rustls-no-provider`: install ring unless the embedding
        // program already installed a provider.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let counts = Arc::new(Counts::default());
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let spans = span_exporter(&settings)?;
        let batch = BatchSpanProcessor::builder(Counted {
            inner: spans,
            counts: counts.clone(),
        })
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(settings.queue_size)
                .with_max_export_batch_size(settings.queue_size.min(512))
                .with_scheduled_delay(settings.schedule_delay)
                .build(),
        )
        .build();
        let sampler = {
            let ratio = Sampler::TraceIdRatioBased(settings.sampling.ratio);
            if settings.sampling.parent_based {
                Sampler::ParentBased(Box::new(ratio))
            } else {
                ratio
            }
        };
        let tracer_provider = SdkTracerProvider::builder()
            .with_span_processor(Gate {
                inner: batch,
                counts: counts.clone(),
                limit: settings.queue_size,
            })
            .with_sampler(sampler)
            .with_resource(resource.clone())
            .build();
        let meter_provider = match &settings.metrics_endpoint {
            Some(endpoint) => {
                let exporter = CountedMetrics {
                    inner: metric_exporter(&settings, endpoint)?,
                    counts: counts.clone(),
                };
                let reader = PeriodicReader::builder(exporter)
                    .with_interval(settings.metrics_interval)
                    .build();
                let provider = SdkMeterProvider::builder()
                    .with_resource(resource)
                    .with_reader(reader)
                    .build();
                Some(provider)
            }
            None => None,
        };
        let meter = match &meter_provider {
            Some(p) => p.meter_with_scope(scope()),
            None => opentelemetry::global::meter_with_scope(scope()),
        };
        let active = Active {
            target: format!(
                "{} over {}",
                settings.traces_endpoint,
                settings.protocol.as_str()
            ),
            counts,
            record_content: settings.record_content,
            content_max_chars: settings.content_max_chars,
            tool_duration: meter
                .f64_histogram(semconv::METRIC_TOOL_DURATION)
                .with_unit("s")
                .with_description("Duration of tool executions")
                .with_boundaries(semconv::TOOL_DURATION_BUCKETS.to_vec())
                .build(),
            agent_duration: meter
                .f64_histogram(semconv::METRIC_AGENT_DURATION)
                .with_unit("s")
                .with_description("Duration of agent turns")
                .with_boundaries(semconv::AGENT_DURATION_BUCKETS.to_vec())
                .build(),
        };
        if ACTIVE.set(active).is_err() {
            let _ = tracer_provider.shutdown_with_timeout(Duration::from_millis(1));
            return Err(anyhow!(
                "OpenTelemetry export is already running in this process"
            ));
        }
        Ok(Telemetry {
            tracer_provider,
            meter_provider,
            settings,
        })
    }

    /// The `tracing` layer that turns [`GenAiSpan`]s into OTel spans. It sees only spans of
    /// [`SPAN_TARGET`]: no events (logs may hold arguments), no other crate's spans.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        use tracing_subscriber::Layer as _;
        let tracer = self.tracer_provider.tracer_with_scope(scope());
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.is_span() && meta.target() == SPAN_TARGET
            }))
    }

    /// The settings it was started with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Sends what is queued and stops, within `limit` (a dead collector must not hold the
    /// exit). Returns the final counts. Call it outside any async runtime (it blocks).
    pub fn shutdown(self, limit: Duration) -> ExportCounts {
        let deadline = std::time::Instant::now() + limit;
        let _ = self.tracer_provider.shutdown_with_timeout(limit);
        if let Some(meter) = self.meter_provider {
            // What is left of the one bound, and a moment for the last metrics at least;
            // only the moment when the spans' collector just failed (it is the same one).
            // On a thread of its own: the SDK's metric reader does not keep to its bound.
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let down = ACTIVE
                .get()
                .is_some_and(|a| a.counts.last_failed.load(Ordering::Relaxed));
            let bound = if down {
                Duration::from_millis(20)
            } else {
                left.max(Duration::from_millis(100))
            };
            let (done, finished) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("otel-metrics-shutdown".into())
                .spawn(move || {
                    let _ = meter.shutdown_with_timeout(bound);
                    let _ = done.send(());
                });
            if spawned.is_ok() {
                let _ = finished.recv_timeout(bound);
            }
        }
        counts().unwrap_or_default()
    }
}

/// Two retries, 100 ms then 200 ms apart (OTLP's own default is three, up to 1.6 s): a
/// collector that is down costs a one-shot `toolbox call` about 0.3 s at exit, not the whole
/// bound; a slow one has its export timeout.
fn retry_policy() -> opentelemetry_otlp::RetryPolicy {
    opentelemetry_otlp::RetryPolicy::recommended()
        .with_max_retries(2)
        .with_initial_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_millis(400))
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("toolbox")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url(semconv::SCHEMA_URL)
        .build()
}

fn span_exporter(settings: &Settings) -> Result<SpanExporterAny> {
    let endpoint = settings.traces_endpoint.clone();
    Ok(match settings.protocol {
        Protocol::HttpProtobuf => SpanExporterAny::Plain(
            over_http(
                opentelemetry_otlp::SpanExporter::builder().with_http(),
                settings,
                &endpoint,
            )
            .build()
            .with_context(|| format!("cannot export spans to {endpoint}"))?,
        ),
        Protocol::Grpc => {
            let grpc = GrpcSettings::new(settings, &endpoint)?;
            SpanExporterAny::OwnRuntime(OwnRuntime::build(move || {
                grpc.apply(opentelemetry_otlp::SpanExporter::builder().with_tonic())
                    .build()
                    .with_context(|| format!("cannot export spans to {endpoint} over gRPC"))
            })?)
        }
    })
}

fn metric_exporter(settings: &Settings, endpoint: &str) -> Result<MetricExporterAny> {
    let endpoint = endpoint.to_string();
    Ok(match settings.protocol {
        Protocol::HttpProtobuf => MetricExporterAny::Plain(
            over_http(
                opentelemetry_otlp::MetricExporter::builder().with_http(),
                settings,
                &endpoint,
            )
            .build()
            .with_context(|| format!("cannot export metrics to {endpoint}"))?,
        ),
        Protocol::Grpc => {
            let grpc = GrpcSettings::new(settings, &endpoint)?;
            MetricExporterAny::OwnRuntime(OwnRuntime::build(move || {
                grpc.apply(opentelemetry_otlp::MetricExporter::builder().with_tonic())
                    .build()
                    .with_context(|| format!("cannot export metrics to {endpoint} over gRPC"))
            })?)
        }
    })
}

/// An OTLP/HTTP exporter's builder (spans or metrics) set up from `settings`.
fn over_http<B: WithExportConfig + WithHttpConfig>(
    builder: B,
    settings: &Settings,
    endpoint: &str,
) -> B {
    builder
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(settings.timeout)
        .with_headers(settings.headers.clone().into_iter().collect())
        .with_retry_policy(retry_policy())
}

/// What a gRPC exporter's builder (spans or metrics) is set up with; moved onto the thread
/// that builds it.
struct GrpcSettings {
    endpoint: String,
    timeout: Duration,
    metadata: opentelemetry_otlp::tonic_types::metadata::MetadataMap,
}

impl GrpcSettings {
    fn new(settings: &Settings, endpoint: &str) -> Result<Self> {
        Ok(GrpcSettings {
            endpoint: endpoint.to_string(),
            timeout: settings.timeout,
            metadata: grpc_metadata(settings)?,
        })
    }

    fn apply<B: WithExportConfig + WithTonicConfig>(self, builder: B) -> B {
        let tls = self.endpoint.starts_with("https://");
        let builder = builder
            .with_endpoint(self.endpoint)
            .with_timeout(self.timeout)
            .with_retry_policy(retry_policy())
            .with_metadata(self.metadata);
        if tls {
            builder.with_tls_config(
                opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                    .with_native_roots(),
            )
        } else {
            builder
        }
    }
}

fn grpc_metadata(
    settings: &Settings,
) -> Result<opentelemetry_otlp::tonic_types::metadata::MetadataMap> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &settings.headers {
        let key = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| anyhow!("header {name:?} cannot be sent as gRPC metadata"))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| anyhow!("the value of header {name:?} cannot be sent as gRPC metadata"))?;
        headers.insert(key, value);
    }
    let map = opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers);
    Ok(map)
}

/// The span exporter, HTTP or gRPC.
#[derive(Debug)]
enum SpanExporterAny {
    Plain(opentelemetry_otlp::SpanExporter),
    OwnRuntime(OwnRuntime<opentelemetry_otlp::SpanExporter>),
}

impl opentelemetry_sdk::trace::SpanExporter for SpanExporterAny {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        match self {
            SpanExporterAny::Plain(e) => e.export(batch).await,
            SpanExporterAny::OwnRuntime(e) => e.export(batch).await,
        }
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        match self {
            SpanExporterAny::Plain(e) => e.shutdown_with_timeout(timeout),
            SpanExporterAny::OwnRuntime(e) => e.shutdown_with_timeout(timeout),
        }
    }
    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        match self {
            SpanExporterAny::Plain(e) => e.force_flush(),
            SpanExporterAny::OwnRuntime(e) => e.force_flush(),
        }
    }
    fn set_resource(&mut self, resource: &Resource) {
        match self {
            SpanExporterAny::Plain(e) => e.set_resource(resource),
            SpanExporterAny::OwnRuntime(e) => e.set_resource(resource),
        }
    }
}

/// The metrics exporter, HTTP or gRPC.
#[derive(Debug)]
enum MetricExporterAny {
    Plain(opentelemetry_otlp::MetricExporter),
    OwnRuntime(OwnRuntime<opentelemetry_otlp::MetricExporter>),
}

impl opentelemetry_sdk::metrics::exporter::PushMetricExporter for MetricExporterAny {
    async fn export(
        &self,
        metrics: &opentelemetry_sdk::metrics::data::ResourceMetrics,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        match self {
            MetricExporterAny::Plain(e) => e.export(metrics).await,
            MetricExporterAny::OwnRuntime(e) => e.export(metrics).await,
        }
    }
    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        match self {
            MetricExporterAny::Plain(e) => e.force_flush(),
            MetricExporterAny::OwnRuntime(e) => e.force_flush(),
        }
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        match self {
            MetricExporterAny::Plain(e) => e.shutdown_with_timeout(timeout),
            MetricExporterAny::OwnRuntime(e) => e.shutdown_with_timeout(timeout),
        }
    }
    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        match self {
            MetricExporterAny::Plain(e) => e.temporality(),
            MetricExporterAny::OwnRuntime(e) => e.temporality(),
        }
    }
}

/// Reads `TRACEPARENT`/`TRACESTATE` from toolbox's own environment once: a traced program
/// that started toolbox is the parent of toolbox's spans that have no other. A bad value is
/// ignored (it is not a call's input), with a warning.
pub fn remember_process_parent() {
    PROCESS_PARENT.get_or_init(|| {
        let raw = std::env::var("TRACEPARENT").ok()?;
        match TraceParent::parse(&raw) {
            Ok(tp) => Some(tp.with_state(std::env::var("TRACESTATE").ok().as_deref())),
            Err(e) => {
                tracing::warn!(target: "toolbox", "ignoring TRACEPARENT from the environment: {e}");
                None
            }
        }
    });
}

/// The variables a child process gets so that code that traces itself joins the call's
/// trace: `TRACEPARENT` (and `TRACESTATE`), upper-case as OTel's environment carrier has
/// them. Empty when there is no trace.
pub fn child_env(trace: Option<&TraceParent>) -> Vec<(&'static str, String)> {
    let Some(tp) = trace else {
        return Vec::new();
    };
    let mut env = vec![("TRACEPARENT", tp.to_string())];
    if let Some(state) = tp.state() {
        env.push(("TRACESTATE", state.to_string()));
    }
    env
}

/// What kind of GenAI operation a span is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// One tool call.
    ExecuteTool,
    /// One agent turn (or a sub-agent's).
    InvokeAgent,
    /// One model request.
    Chat,
}

/// A span exported as one GenAI operation. Inert when export is off: every setter returns
/// at once, so the caller need not check.
#[derive(Debug, Clone)]
pub struct GenAiSpan {
    span: tracing::Span,
    recording: bool,
}

impl GenAiSpan {
    /// A new span of `operation` named `name()` (`execute_tool shell`: asked only when the
    /// span is exported). Its parent is `parent` when given; else the current GenAI span;
    /// else the `TRACEPARENT` toolbox was started with; else it starts a trace.
    pub fn start(
        operation: Operation,
        name: impl FnOnce() -> String,
        parent: Option<&TraceParent>,
    ) -> GenAiSpan {
        let span = match operation {
            Operation::ExecuteTool => tracing::info_span!(
                target: "gen_ai",
                "execute_tool",
                otel.name = tracing::field::Empty,
                gen_ai.operation.name = "execute_tool",
                otel.kind = "internal",
                otel.status_code = tracing::field::Empty,
                otel.status_description = tracing::field::Empty,
            ),
            Operation::InvokeAgent => tracing::info_span!(
                target: "gen_ai",
                "invoke_agent",
                otel.name = tracing::field::Empty,
                gen_ai.operation.name = "invoke_agent",
                otel.kind = "internal",
                otel.status_code = tracing::field::Empty,
                otel.status_description = tracing::field::Empty,
            ),
            Operation::Chat => tracing::info_span!(
                target: "gen_ai",
                "chat",
                otel.name = tracing::field::Empty,
                gen_ai.operation.name = "chat",
                otel.kind = "client",
                otel.status_code = tracing::field::Empty,
                otel.status_description = tracing::field::Empty,
            ),
        };
        let recording = ACTIVE.get().is_some() && !span.is_disabled();
        if recording {
            // First: a span's name can only change until it starts.
            span.record("otel.name", name().as_str());
            let inherited = opentelemetry::Context::current()
                .span()
                .span_context()
                .is_valid();
            let parent = parent.or_else(|| {
                if inherited {
                    None
                } else {
                    PROCESS_PARENT.get().and_then(Option::as_ref)
                }
            });
            if let Some(tp) = parent {
                let _ = span.set_parent(remote_context(tp));
            }
        }
        GenAiSpan { span, recording }
    }

    /// The `tracing` span, to `.instrument()` the work it covers.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Whether it is exported (export is on and the span is enabled).
    pub fn recording(&self) -> bool {
        self.recording
    }

    /// Sets an attribute.
    pub fn set(&self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        if self.recording {
            self.span.set_attribute(key, value);
        }
    }

    /// Sets a string-array attribute (`gen_ai.response.finish_reasons`).
    pub fn set_strings(&self, key: &'static str, values: Vec<String>) {
        if self.recording {
            let values: Vec<opentelemetry::StringValue> =
                values.into_iter().map(Into::into).collect();
            self.span
                .set_attribute(key, opentelemetry::Value::Array(values.into()));
        }
    }

    /// Sets an attribute computed only when the span is exported.
    pub fn set_with<V: Into<opentelemetry::Value>>(
        &self,
        key: &'static str,
        value: impl FnOnce() -> V,
    ) {
        if self.recording {
            self.span.set_attribute(key, value());
        }
    }

    /// Records content (arguments, a result) only when the operator opted in, cut to
    /// `content_max_chars` with every secret toolbox holds redacted.
    pub fn content(&self, key: &'static str, text: impl FnOnce() -> String) {
        if !self.recording {
            return;
        }
        let Some(active) = ACTIVE.get() else { return };
        if !active.record_content {
            return;
        }
        let text = crate::secrets::redact(&text());
        let cut: String = text.chars().take(active.content_max_chars).collect();
        let cut = if cut.len() < text.len() {
            format!("{cut}… [cut at {} characters]", active.content_max_chars)
        } else {
            cut
        };
        self.span.set_attribute(key, cut);
    }

    /// Marks the span failed: `error.type` (a low-cardinality class) and an error status.
    pub fn fail(&self, error_type: &str, description: impl FnOnce() -> String) {
        if self.recording {
            self.span
                .set_attribute(semconv::ERROR_TYPE, error_type.to_string());
            let description: String = description().chars().take(256).collect();
            self.span.set_status(Status::error(description));
        }
    }

    /// This span's own context as a W3C trace context, for a child process or a request
    /// to another service; `None` when it is not exported.
    pub fn trace_parent(&self) -> Option<TraceParent> {
        if !self.recording {
            return None;
        }
        let cx = self.span.context();
        let span_ref = cx.span();
        let sc = span_ref.span_context();
        if !sc.is_valid() {
            return None;
        }
        let state = sc.trace_state().header();
        TraceParent::new(
            sc.trace_id().to_bytes(),
            sc.span_id().to_bytes(),
            sc.is_sampled(),
        )
        .map(|tp| tp.with_state((!state.is_empty()).then_some(state.as_str())))
    }
}

fn remote_context(tp: &TraceParent) -> opentelemetry::Context {
    let state = tp
        .state()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let flags = if tp.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let sc = SpanContext::new(
        TraceId::from_bytes(tp.trace_id()),
        SpanId::from_bytes(tp.parent_id()),
        flags,
        true,
        state,
    );
    opentelemetry::Context::new().with_remote_span_context(sc)
}

/// Records one tool call's duration in `gen_ai.execute_tool.duration` (seconds), with its
/// tool name and, if it failed, its error class.
pub fn record_tool_duration(seconds: f64, tool: &str, error_type: Option<&str>) {
    let Some(active) = ACTIVE.get() else { return };
    let mut attributes = vec![
        KeyValue::new(semconv::TOOL_NAME, tool.to_string()),
        KeyValue::new(semconv::TOOL_TYPE, "function"),
    ];
    if let Some(e) = error_type {
        attributes.push(KeyValue::new(semconv::ERROR_TYPE, e.to_string()));
    }
    active.tool_duration.record(seconds, &attributes);
}

/// Records one agent turn's duration in `gen_ai.invoke_agent.duration` (seconds).
pub fn record_agent_duration(seconds: f64, agent: &str, error_type: Option<&str>) {
    let Some(active) = ACTIVE.get() else { return };
    let mut attributes = vec![KeyValue::new(semconv::AGENT_NAME, agent.to_string())];
    if let Some(e) = error_type {
        attributes.push(KeyValue::new(semconv::ERROR_TYPE, e.to_string()));
    }
    active.agent_duration.record(seconds, &attributes);
}
