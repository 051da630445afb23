//! `fdb-kubernetes-monitor`.

pub async fn main(_args: Vec<String>) -> i32 {
    1
}
