//! The engine every job shares: configuration, pooling allocator, the epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings::Job;
use super::cache::CompileCache;
use super::run::StoreData;

/// How often the epoch advances. Deadlines and cancellation are checked, and running
/// jobs yield to each other, at this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Per-job limits, on by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes one linear memory of the job may grow to.
    pub memory_bytes: usize,
    /// The most bytes of output a job may return.
    pub output_bytes: usize,
    /// The most log lines a job may write; the rest are dropped.
    pub log_lines: u32,
    /// How long a cancelled job may keep running before it is stopped hard.
    pub cancel_grace: Duration,
    /// The largest checkpoint a job may save (`wasmgear:job/checkpoint`), in bytes.
    pub checkpoint_bytes: usize,
}

/// Memory cap of one job when nothing else is said: enough for interpreters (Python, JS).
pub const DEFAULT_MEMORY_BYTES: usize = 256 * 1024 * 1024;
/// Output cap of one job when nothing else is said.
pub const DEFAULT_OUTPUT_BYTES: usize = 16 * 1024 * 1024;
/// Log lines one job may write when nothing else is said.
pub const DEFAULT_LOG_LINES: u32 = 1000;
/// Grace period after cancellation when nothing else is said.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(5);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            output_bytes: DEFAULT_OUTPUT_BYTES,
            log_lines: DEFAULT_LOG_LINES,
            cancel_grace: DEFAULT_CANCEL_GRACE,
            checkpoint_bytes: wasmgear_proto::limits::DEFAULT_CHECKPOINT_BYTES as usize,
        }
    }
}

/// How to build a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How many job instances may exist at once (sizes the pooling allocator).
    pub max_instances: u32,
    /// Limits applied to every job (a plugin's manifest may tighten them).
    pub limits: Limits,
    /// Whether to meter fuel, so that manifests can give jobs an instruction budget.
    /// Costs speed for every job.
    pub fuel: bool,
    /// Where compiled components are cached; `None`: compile every time.
    pub cache: Option<CompileCache>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            max_instances: 100,
            limits: Limits::default(),
            fuel: false,
            cache: None,
        }
    }
}

/// The wasmtime configuration: component model, epoch deadlines, pooled instances.
fn engine_config(config: &RuntimeConfig) -> Config {
    let mut pool = PoolingAllocationConfig::new();
    // Sized from measurements of Rust, Python and JavaScript guests (TOOLCHAIN-NOTES).
    let instances = config.max_instances.max(1);
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(20))
        .total_memories(instances.saturating_mul(4))
        .total_tables(instances.saturating_mul(20))
        .total_stacks(instances)
        .max_memory_size(config.limits.memory_bytes)
        .table_elements(crate::run::MAX_TABLE_ELEMENTS)
        .max_component_instance_size(4 << 20)
        .max_core_instance_size(4 << 20)
        .max_core_instances_per_component(200)
        .max_memories_per_component(10)
        .max_tables_per_component(100)
        .linear_memory_keep_resident(8 << 20)
        .table_keep_resident(1 << 20)
        .pagemap_scan(Enabled::Auto);

    let mut wasm = Config::new();
    wasm.wasm_component_model(true)
        .epoch_interruption(true)
        .consume_fuel(config.fuel)
        .wasm_backtrace_max_frames(std::num::NonZeroUsize::new(64))
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    wasm
}

/// Compiles plugins and runs jobs. One per worker; cheap to share behind an `Arc`.
pub struct Runtime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreData>,
    pub(crate) limits: Limits,
    pub(crate) fuel: bool,
    pub(crate) cache: Option<CompileCache>,
    ticker_stop: Arc<AtomicBool>,
}

impl Runtime {
    /// Builds the engine and linker and starts the epoch ticker thread.
    pub fn new(config: RuntimeConfig) -> wasmtime::Result<Self> {
        let engine = Engine::new(&engine_config(&config))?;
        let mut linker = Linker::<StoreData>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        Job::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        // A batch plugin's one import of its own (the others are the job world's).
        crate::bindings::batch::wasmgear::job::batch_jobs::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |state| state,
        )?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let stop = ticker_stop.clone();
        let ticking = engine.clone();
        std::thread::Builder::new()
            .name("wasmgear-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    ticking.increment_epoch();
                }
            })
            .map_err(|e| wasmtime::format_err!("cannot start the epoch ticker thread: {e}"))?;

        Ok(Runtime {
            engine,
            linker,
            limits: config.limits,
            fuel: config.fuel,
            cache: config.cache,
            ticker_stop,
        })
    }

    /// The wasmtime engine every job runs on (for embedders and benchmarks).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}
