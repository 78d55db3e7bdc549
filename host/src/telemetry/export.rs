//! The exporter: OTel's batch span processor (its own thread, a bounded queue) and a
//! periodic metrics reader, both sending OTLP over HTTP or gRPC. Two thin wrappers count
//! what happens to every span, because the SDK keeps its own drop count private and does
//! not count failed exports at all:
//!
//! - [`Gate`] sits in front of the batch processor. A span that would find the queue full
//!   is dropped here and counted; so the processor itself never drops one.
//! - [`Counted`] sits around the exporter: each batch is counted as exported or failed,
//!   and leaves the gate's count of spans in flight.
//!
//! A gRPC exporter needs a tokio reactor, which the batch thread does not have: [`OwnRuntime`]
//! gives it a private one-thread runtime, driven only while an export runs.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

/// What happened to the spans handed to the exporter so far.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) in_flight: AtomicUsize,
    pub(crate) ended: AtomicU64,
    pub(crate) exported: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) metric_exports_failed: AtomicU64,
    /// Whether the last batch failed (the collector is down or refusing).
    pub(crate) last_failed: std::sync::atomic::AtomicBool,
}

/// Drops a span when `limit` spans are already queued or being sent, and counts it.
#[derive(Debug)]
pub(crate) struct Gate<P> {
    pub(crate) inner: P,
    pub(crate) counts: Arc<Counts>,
    pub(crate) limit: usize,
}

impl<P: SpanProcessor> SpanProcessor for Gate<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.counts.ended.fetch_add(1, Ordering::Relaxed);
        if self.counts.in_flight.fetch_add(1, Ordering::AcqRel) >= self.limit {
            self.counts.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Counts each batch as exported or failed.
#[derive(Debug)]
pub(crate) struct Counted<E> {
    pub(crate) inner: E,
    pub(crate) counts: Arc<Counts>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        let counter = match result {
            Ok(()) => &self.counts.exported,
            Err(_) => &self.counts.failed,
        };
        self.counts
            .last_failed
            .store(result.is_err(), Ordering::Relaxed);
        counter.fetch_add(n as u64, Ordering::Relaxed);
        self.counts.in_flight.fetch_sub(n, Ordering::AcqRel);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// A metrics exporter whose failures are counted.
#[derive(Debug)]
pub(crate) struct CountedMetrics<E> {
    pub(crate) inner: E,
    pub(crate) counts: Arc<Counts>,
}

impl<E: PushMetricExporter> PushMetricExporter for CountedMetrics<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        if result.is_err() {
            self.counts
                .metric_exports_failed
                .fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// An exporter that needs a tokio reactor (gRPC), on a private current-thread runtime. The
/// runtime is driven only inside [`block_on`](tokio::runtime::Runtime::block_on) on the
/// exporting thread (the batch processor's, the metrics reader's), never on toolbox's own.
#[derive(Debug)]
pub(crate) struct OwnRuntime<E> {
    // Dropped first: the exporter's channel before the runtime that drives it.
    inner: E,
    runtime: tokio::runtime::Runtime,
}

impl<E> OwnRuntime<E> {
    /// Builds the exporter with `build` inside a new private runtime (tonic spawns its
    /// channel's worker there). It runs on a thread of its own, so that it works from inside
    /// toolbox's runtime too.
    pub(crate) fn build<B>(build: B) -> anyhow::Result<Self>
    where
        B: FnOnce() -> anyhow::Result<E> + Send,
        E: Send,
    {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    let inner = {
                        let _entered = runtime.enter();
                        build()?
                    };
                    Ok(OwnRuntime { inner, runtime })
                })
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("building the gRPC exporter panicked")))
        })
    }
}

impl<E: SpanExporter> SpanExporter for OwnRuntime<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.runtime.block_on(self.inner.export(batch))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter + std::fmt::Debug> PushMetricExporter for OwnRuntime<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        self.runtime.block_on(self.inner.export(metrics))
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
