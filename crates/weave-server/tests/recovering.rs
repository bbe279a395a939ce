//! While the store is replayed the port is open and every request gets 503 "recovering"
//! (a clear answer to retry), not a refused connection.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_answers_503_recovering_until_the_store_is_open() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (open, opened) = tokio::sync::oneshot::channel::<()>();
    let recovering = tokio::spawn(async move {
        let out = weave_server::answer_while_recovering(&listener, async move {
            let _ = opened.await;
            "replayed"
        })
        .await;
        (out, listener)
    });
    let answer = tokio::task::spawn_blocking(move || {
        let c = reqwest::blocking::Client::new();
        let r = c.post(format!("http://{addr}/v1/jobs")).body("{\"id\":\"x\"}").send().unwrap();
        (r.status().as_u16(), r.text().unwrap())
    })
    .await
    .unwrap();
    assert_eq!(answer.0, 503, "{}", answer.1);
    assert!(answer.1.contains("recovering"), "{}", answer.1);
    open.send(()).unwrap();
    let (out, listener) = recovering.await.unwrap();
    assert_eq!(out, "replayed");
    // The same listener then serves normally (here: still accepting).
    assert_eq!(listener.local_addr().unwrap(), addr);
}
