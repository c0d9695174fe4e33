//! The leader loop's unit tests too large to sit in their module's file.

mod core;
mod delivery_plan;
