//! `weir bench pool`: the connection pool's state changes through a mutex, the combiner
//! without yield and the combiner with yield.

pub(crate) fn run(config: weir_connection_pool::bench::BenchConfig) -> anyhow::Result<()> {
    println!(
        "Connection pool: acquire+release through a mutex around the pool state, the combiner \
         without yield, and the combiner with yield ({:?}); {} per cell, median of {} runs.",
        config.combiner,
        humantime::format_duration(config.duration),
        config.runs
    );
    println!();
    println!("{}", weir_connection_pool::bench::run(&config)?);
    Ok(())
}
