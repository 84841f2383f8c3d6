//! The migrations are embedded at compile time (`sqlx::migrate!`): rebuild when one changes.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
