fn main() {
    let path = std::env::args().nth(1).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let exp: tlbsim::config::Experiment = tlbsim::config::parse_toml(&path, &text).unwrap();
    let t = std::time::Instant::now();
    match tlbsim::sim::run(&exp, &Default::default()) {
        Ok(o) => println!(
            "{} ns {:?} {:?} host {:?}",
            o.elapsed_ns,
            o.stats.total,
            o.stats.flush_latency_ns,
            t.elapsed()
        ),
        Err(e) => println!("ERR {e}"),
    }
}
