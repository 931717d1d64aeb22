//! `--metrics-addr`: the library's metrics (its `metrics` feature, see the zkfence crate docs'
//! *Metrics* table) served as Prometheus text at `http://ADDR/` by
//! `metrics-exporter-prometheus`.

use std::net::SocketAddr;

use metrics_exporter_prometheus::PrometheusBuilder;

use crate::exit::{Failure, USAGE};

/// Histogram buckets for the `_seconds` metrics, in seconds: from a fast grant (a few
/// milliseconds) to a leadership held for an hour. Buckets, not the exporter's default
/// summaries, so an operator can add up the peers' histograms.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0, 3600.0,
];

/// Starts serving on `addr`, on the current runtime. Binds at once, so an address that
/// cannot be served fails here (exit 2), before anything is acquired.
pub(crate) fn serve(addr: SocketAddr) -> Result<(), Failure> {
    let cannot = |why: String| {
        Failure::new(
            USAGE,
            format!("--metrics-addr {addr}: cannot serve metrics there: {why}"),
        )
    };
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&BUCKETS)
        .map_err(|e| cannot(e.to_string()))?
        .install()
        .map_err(|e| cannot(e.to_string()))?;
    zkfence::describe_metrics();
    tracing::info!(%addr, "serving Prometheus metrics");
    Ok(())
}
