use affinity::client::Client;
use affinity::driver::DriverContext;
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}
fn main() {
    if std::env::args().any(|a| a == "bump") {
        let v = vec![1u8; 20 << 20];
        std::hint::black_box(&v);
        drop(v);
        let h = std::thread::spawn(|| {
            let v = vec![1u8; 20 << 20];
            std::hint::black_box(&v);
        });
        h.join().unwrap();
    }
    let client = Client::new(DriverContext::default()).unwrap();
    let before = rss();
    let t = std::time::Instant::now();
    let mut pubs = Vec::new();
    for i in 0..200 {
        pubs.push(client.add_publication(&format!("aeron:udp?endpoint=127.0.0.1:{}", 40000 + i), 1).unwrap());
    }
    println!("200 pubs: +{} MB in {:?}", (rss() - before) >> 20, t.elapsed());
    std::thread::sleep(std::time::Duration::from_millis(500));
    println!("after 0.5s: +{} MB", (rss() - before) >> 20);
    for p in &pubs {
        p.close();
    }
    drop(pubs);
    std::thread::sleep(std::time::Duration::from_secs(1));
    println!("after close: +{} MB", (rss() as i64 - before as i64) >> 20);
}
