//! The service proxy: for every Service whose ClusterIP is a loopback address, a TCP listener
//! on `clusterIP:port` that forwards each connection to a ready endpoint (round-robin, target
//! ports resolved per endpoint). Endpoints are looked up per connection, so new connections
//! follow a failover. Services whose ClusterIP is not in 127/8 are skipped.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::endpoints::{ServiceCache, ServiceView};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    name: String,
    port_name: String,
    addr: SocketAddr,
}

#[derive(Debug)]
pub struct Proxy {
    services: Arc<ServiceCache>,
    listeners: Mutex<HashMap<Key, CancellationToken>>,
    next: AtomicUsize,
    cancel: CancellationToken,
}

fn desired(views: &[ServiceView]) -> Vec<Key> {
    let mut out = Vec::new();
    for v in views {
        let Some(ip) = v
            .cluster_ip
            .as_deref()
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        else {
            continue;
        };
        if !ip.is_loopback() {
            continue;
        }
        for p in v.ports.iter().filter(|p| p.protocol == "TCP") {
            out.push(Key {
                namespace: v.namespace.clone(),
                name: v.name.clone(),
                port_name: p.name.clone(),
                addr: SocketAddr::from((ip, p.port)),
            });
        }
    }
    out
}

impl Proxy {
    pub fn new(services: Arc<ServiceCache>) -> Self {
        Self {
            services,
            listeners: Mutex::default(),
            next: AtomicUsize::new(0),
            cancel: CancellationToken::new(),
        }
    }

    /// Adopts new Service views: starts listeners for new ClusterIP ports, stops those of
    /// deleted Services, retries listeners that failed to bind before.
    pub fn reconcile(self: &Arc<Self>, views: &[ServiceView]) {
        let want = desired(views);
        let Ok(mut listeners) = self.listeners.lock() else {
            return;
        };
        listeners.retain(|k, token| {
            let keep = want.contains(k);
            if !keep {
                token.cancel();
            }
            keep
        });
        for key in want {
            if listeners.contains_key(&key) || self.cancel.is_cancelled() {
                continue;
            }
            match bind(key.addr) {
                Ok(listener) => {
                    let token = self.cancel.child_token();
                    listeners.insert(key.clone(), token.clone());
                    tokio::spawn(self.clone().serve(listener, key, token));
                }
                Err(e) => {
                    tracing::warn!(addr = %key.addr, service = %key.name, error = %e, "cannot listen for service");
                }
            }
        }
    }

    /// Stops every listener and forwarded connection.
    pub fn stop(&self) {
        self.cancel.cancel();
        if let Ok(mut l) = self.listeners.lock() {
            l.clear();
        }
    }

    /// A ready endpoint for a new connection, round-robin.
    fn pick(&self, key: &Key) -> Option<SocketAddr> {
        let views = self.services.get();
        let view = views
            .iter()
            .find(|v| v.namespace == key.namespace && v.name == key.name)?;
        let ready: Vec<SocketAddr> = view
            .endpoints
            .iter()
            .filter(|e| e.ready)
            .filter_map(|e| {
                let ip: Ipv4Addr = e.ip.parse().ok()?;
                let port = e.ports.get(&key.port_name).copied()?;
                Some(SocketAddr::from((ip, port)))
            })
            .collect();
        if ready.is_empty() {
            return None;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        ready.get(n % ready.len()).copied()
    }

    async fn serve(self: Arc<Self>, listener: TcpListener, key: Key, token: CancellationToken) {
        loop {
            let accepted = tokio::select! {
                () = token.cancelled() => return,
                a = listener.accept() => a,
            };
            let Ok((mut inbound, _)) = accepted else {
                continue;
            };
            let Some(target) = self.pick(&key) else {
                tracing::debug!(service = %key.name, "no ready endpoints; closing connection");
                continue;
            };
            let token = token.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = TcpStream::connect(target).await else {
                    return;
                };
                tokio::select! {
                    () = token.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                }
            });
        }
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}
