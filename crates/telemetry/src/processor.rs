//! Spans leave the job path at once: a finished span goes into a bounded queue (or, when the
//! queue is full, is dropped and counted), and one task sends them in batches. A slow or dead
//! collector costs spans, counted, never a job's time.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{mpsc, oneshot};

use crate::config::Batching;

/// Spans by what became of them, since the start.
#[derive(Debug, Default)]
pub struct SpanCounts {
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
}

impl SpanCounts {
    /// Spans the collector accepted.
    pub fn exported(&self) -> u64 {
        self.exported.load(Ordering::Relaxed)
    }

    /// Spans dropped because the queue to the exporter was full (the collector slow or
    /// down): never waited for.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Spans whose export failed or ran out of time.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

enum Message {
    Span(Box<SpanData>),
    /// Send what is queued now, then answer.
    Flush(oneshot::Sender<()>),
}

/// The span processor: `on_end` never waits.
pub(crate) struct QueueProcessor<E> {
    queue: mpsc::Sender<Message>,
    counts: Arc<SpanCounts>,
    /// The exporter and the queue's far end, until [`Starter::start`] hands them to the
    /// sending task (the provider sets the resource on the exporter first).
    idle: Idle<E>,
}

type Idle<E> = Arc<Mutex<Option<(E, mpsc::Receiver<Message>)>>>;

/// Starts the sending task, once the provider has given the exporter its resource.
pub(crate) struct Starter<E> {
    idle: Idle<E>,
    batching: Batching,
    counts: Arc<SpanCounts>,
}

impl<E: SpanExporter + 'static> Starter<E> {
    /// Starts the sending task on the current Tokio runtime (once; later calls do nothing).
    pub(crate) fn start(&self) {
        let taken = self.idle.lock().map(|mut idle| idle.take()).ok().flatten();
        if let Some((exporter, receiver)) = taken {
            tokio::spawn(send_batches(
                exporter,
                receiver,
                self.batching,
                self.counts.clone(),
            ));
        }
    }
}

impl<E> std::fmt::Debug for QueueProcessor<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueProcessor")
            .field("counts", &self.counts)
            .finish()
    }
}

/// A handle to the sending task: flush from async code.
#[derive(Clone)]
pub(crate) struct Flusher(mpsc::Sender<Message>);

impl Flusher {
    /// Waits (up to `timeout`) until what was queued before this call has been sent.
    pub(crate) async fn flush(&self, timeout: Duration) {
        let (done, sent) = oneshot::channel();
        let asked = tokio::time::timeout(timeout, async {
            if self.0.send(Message::Flush(done)).await.is_ok() {
                let _ = sent.await;
            }
        });
        let _ = asked.await;
    }
}

impl<E: SpanExporter + 'static> QueueProcessor<E> {
    /// The processor, and what starts its sending task (after the provider is built).
    pub(crate) fn new(
        exporter: E,
        batching: Batching,
        counts: Arc<SpanCounts>,
    ) -> (Self, Starter<E>) {
        let (queue, receiver) = mpsc::channel(batching.max_queue);
        let idle: Idle<E> = Arc::new(Mutex::new(Some((exporter, receiver))));
        let starter = Starter {
            idle: idle.clone(),
            batching,
            counts: counts.clone(),
        };
        (
            QueueProcessor {
                queue,
                counts,
                idle,
            },
            starter,
        )
    }

    /// A flush handle for this processor's queue.
    pub(crate) fn flusher(&self) -> Flusher {
        Flusher(self.queue.clone())
    }
}

/// Sends the queued spans in batches of at most `max_batch`, each batch once it is full or
/// its first span has waited `delay`, until every sender is gone.
async fn send_batches<E: SpanExporter>(
    exporter: E,
    mut queue: mpsc::Receiver<Message>,
    batching: Batching,
    counts: Arc<SpanCounts>,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(batching.max_batch);
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let message = match deadline {
            Some(at) => match tokio::time::timeout_at(at, queue.recv()).await {
                Ok(message) => message,
                Err(_) => {
                    export(&exporter, &mut batch, batching.export_timeout, &counts).await;
                    deadline = None;
                    continue;
                }
            },
            None => queue.recv().await,
        };
        match message {
            Some(Message::Span(span)) => {
                if batch.is_empty() {
                    deadline = Some(tokio::time::Instant::now() + batching.delay);
                }
                batch.push(*span);
                if batch.len() >= batching.max_batch {
                    export(&exporter, &mut batch, batching.export_timeout, &counts).await;
                    deadline = None;
                }
            }
            Some(Message::Flush(done)) => {
                waiting.push(done);
                export(&exporter, &mut batch, batching.export_timeout, &counts).await;
                deadline = None;
                for done in waiting.drain(..) {
                    let _ = done.send(());
                }
            }
            None => {
                export(&exporter, &mut batch, batching.export_timeout, &counts).await;
                let _ = exporter.shutdown();
                return;
            }
        }
    }
}

/// Sends `batch` (emptying it), counting its spans as exported or failed.
async fn export<E: SpanExporter>(
    exporter: &E,
    batch: &mut Vec<SpanData>,
    timeout: Duration,
    counts: &SpanCounts,
) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    let n = spans.len() as u64;
    match tokio::time::timeout(timeout, exporter.export(spans)).await {
        Ok(Ok(())) => {
            counts.exported.fetch_add(n, Ordering::Relaxed);
        }
        Ok(Err(error)) => {
            counts.failed.fetch_add(n, Ordering::Relaxed);
            tracing::debug!(target: "wasmgear::telemetry", %error, spans = n, "spans not exported");
        }
        Err(_) => {
            counts.failed.fetch_add(n, Ordering::Relaxed);
            tracing::debug!(target: "wasmgear::telemetry", ?timeout, spans = n, "span export timed out");
        }
    }
}

impl<E: SpanExporter + 'static> SpanProcessor for QueueProcessor<E> {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.queue.try_send(Message::Span(Box::new(span))).is_err() {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks for what is queued to be sent, without waiting (this is called from sync code,
    /// maybe on the runtime the sending task needs): [`Telemetry::shutdown`](crate::Telemetry::shutdown)
    /// is the flush that waits.
    fn force_flush(&self) -> OTelSdkResult {
        let (done, _) = oneshot::channel();
        self.queue
            .try_send(Message::Flush(done))
            .map_err(|_| OTelSdkError::InternalFailure("the span queue is full".into()))
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Ok(mut idle) = self.idle.lock()
            && let Some((exporter, _)) = idle.as_mut()
        {
            exporter.set_resource(resource);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Tracer, TracerProvider};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    /// An exporter that never answers (a collector that hangs).
    #[derive(Debug)]
    struct Hanging;

    impl SpanExporter for Hanging {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            std::future::pending().await
        }
    }

    /// With the exporter stuck, spans beyond the queue are dropped and counted, ending a span
    /// never waits, and the stuck export counts its spans as failed once its time is up.
    #[tokio::test(start_paused = true)]
    async fn a_hanging_collector_costs_spans_never_time() {
        let counts = Arc::new(SpanCounts::default());
        let batching = Batching {
            max_queue: 4,
            max_batch: 2,
            delay: Duration::from_millis(10),
            export_timeout: Duration::from_secs(1),
        };
        let (processor, starter) = QueueProcessor::new(Hanging, batching, counts.clone());
        let flusher = processor.flusher();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        starter.start();
        let tracer = provider.tracer("test");
        // Two fill the first batch (stuck in its export), then 4 fill the queue.
        for _ in 0..2 {
            tracer.in_span("job", |_| {});
        }
        tokio::task::yield_now().await;
        for _ in 0..10 {
            tracer.in_span("job", |_| {});
        }
        assert_eq!(counts.dropped(), 6);
        assert_eq!(counts.exported(), 0);
        // The stuck export gives up after its timeout; the queued spans go next.
        flusher.flush(Duration::from_secs(10)).await;
        assert_eq!(counts.failed(), 6);
        assert_eq!(counts.exported(), 0);
    }
}
