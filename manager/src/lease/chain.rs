//! The chain of schemas: each converts to and from the next newer one only. Schema 2 ↔ schema 3
//! (`super::v3`) ↔ schema 4 (`super::v4`) ↔ schema 5 (`super::v5`) ↔ schema 6 (`super::v6`) ↔
//! schema 7 (`super::v7`) ↔ schema 8 (`super::v8`) ↔ schema 9 (`super::v9`) ↔ schema 10
//! (`super::v10`) ↔ this build's (`super::v10_current`, the newest link). A record of an older
//! schema is read by converting it up one schema at a time, and a value is written at an older
//! schema by converting it down one at a time, each step failing when its schema cannot express
//! the value. Adding a schema adds one link at the new end and a pair of functions here.

use super::schema::NotExpressible;
use super::{v10, v2, v3, v4, v5, v6, v7, v8, v9, Command, LeaseState};

/// This build's command in schema 10's types, if schema 10 can express it.
pub fn command_to_v10(command: &Command) -> Result<v10::Command, NotExpressible> {
    v10::Command::try_from(command)
}

/// A schema 10 command in this build's types.
pub fn command_from_v10(command: v10::Command) -> Command {
    command.into()
}

/// This build's command in schema 9's types (through schema 10), if schema 9 can express it.
pub fn command_to_v9(command: &Command) -> Result<v9::Command, NotExpressible> {
    v9::Command::try_from(command_to_v10(command)?)
}

/// A schema 9 command in this build's types (through schema 10).
pub fn command_from_v9(command: v9::Command) -> Command {
    command_from_v10(command.into())
}

/// This build's command in schema 8's types (through schema 9), if schema 8 can express it.
pub fn command_to_v8(command: &Command) -> Result<v8::Command, NotExpressible> {
    v8::Command::try_from(command_to_v9(command)?)
}

/// A schema 8 command in this build's types (through schema 9).
pub fn command_from_v8(command: v8::Command) -> Command {
    command_from_v9(command.into())
}

/// This build's command in schema 7's types (through schema 8), if schema 7 can express it.
pub fn command_to_v7(command: &Command) -> Result<v7::Command, NotExpressible> {
    v7::Command::try_from(command_to_v8(command)?)
}

/// A schema 7 command in this build's types (through schema 8).
pub fn command_from_v7(command: v7::Command) -> Command {
    command_from_v8(command.into())
}

/// This build's command in schema 6's types (through schema 7), if schema 6 can express it.
pub fn command_to_v6(command: &Command) -> Result<v6::Command, NotExpressible> {
    v6::Command::try_from(command_to_v7(command)?)
}

/// A schema 6 command in this build's types (through schema 7).
pub fn command_from_v6(command: v6::Command) -> Command {
    command_from_v7(command.into())
}

/// This build's command in schema 5's types (through schema 6), if schema 5 can express it.
pub fn command_to_v5(command: &Command) -> Result<v5::Command, NotExpressible> {
    v5::Command::try_from(command_to_v6(command)?)
}

/// A schema 5 command in this build's types (through schema 6).
pub fn command_from_v5(command: v5::Command) -> Command {
    command_from_v6(command.into())
}

/// This build's command in schema 4's types (through schema 5), if schema 4 can express it.
pub fn command_to_v4(command: &Command) -> Result<v4::Command, NotExpressible> {
    v4::Command::try_from(command_to_v5(command)?)
}

/// A schema 4 command in this build's types (through schema 5).
pub fn command_from_v4(command: v4::Command) -> Command {
    command_from_v5(command.into())
}

/// This build's command in schema 3's types (through schema 4), if schema 3 can express it.
pub fn command_to_v3(command: &Command) -> Result<v3::Command, NotExpressible> {
    v3::Command::try_from(command_to_v4(command)?)
}

/// A schema 3 command in this build's types (through schema 4).
pub fn command_from_v3(command: v3::Command) -> Command {
    command_from_v4(command.into())
}

/// This build's command in schema 2's types (through schema 3), if schema 2 can express it.
pub fn command_to_v2(command: &Command) -> Result<v2::Command, NotExpressible> {
    v2::Command::try_from(command_to_v3(command)?)
}

/// A schema 2 command in this build's types (through schema 3).
pub fn command_from_v2(command: v2::Command) -> Command {
    command_from_v3(command.into())
}

/// This build's state in schema 10's types, if schema 10 can express it.
pub fn state_to_v10(state: &LeaseState) -> Result<v10::LeaseState, NotExpressible> {
    v10::LeaseState::try_from(state)
}

/// A schema 10 state in this build's types.
pub fn state_from_v10(state: v10::LeaseState) -> LeaseState {
    state.into()
}

/// This build's state in schema 9's types (through schema 10), if schema 9 can express it.
pub fn state_to_v9(state: &LeaseState) -> Result<v9::LeaseState, NotExpressible> {
    v9::LeaseState::try_from(state_to_v10(state)?)
}

/// A schema 9 state in this build's types (through schema 10).
pub fn state_from_v9(state: v9::LeaseState) -> LeaseState {
    state_from_v10(state.into())
}

/// This build's state in schema 8's types (through schema 9), if schema 8 can express it.
pub fn state_to_v8(state: &LeaseState) -> Result<v8::LeaseState, NotExpressible> {
    v8::LeaseState::try_from(state_to_v9(state)?)
}

/// A schema 8 state in this build's types (through schema 9).
pub fn state_from_v8(state: v8::LeaseState) -> LeaseState {
    state_from_v9(state.into())
}

/// This build's state in schema 7's types (through schema 8), if schema 7 can express it.
pub fn state_to_v7(state: &LeaseState) -> Result<v7::LeaseState, NotExpressible> {
    v7::LeaseState::try_from(state_to_v8(state)?)
}

/// A schema 7 state in this build's types (through schema 8).
pub fn state_from_v7(state: v7::LeaseState) -> LeaseState {
    state_from_v8(state.into())
}

/// This build's state in schema 6's types (through schema 7), if schema 6 can express it.
pub fn state_to_v6(state: &LeaseState) -> Result<v6::LeaseState, NotExpressible> {
    v6::LeaseState::try_from(state_to_v7(state)?)
}

/// A schema 6 state in this build's types (through schema 7).
pub fn state_from_v6(state: v6::LeaseState) -> LeaseState {
    state_from_v7(state.into())
}

/// This build's state in schema 5's types (through schema 6), if schema 5 can express it.
pub fn state_to_v5(state: &LeaseState) -> Result<v5::LeaseState, NotExpressible> {
    v5::LeaseState::try_from(state_to_v6(state)?)
}

/// A schema 5 state in this build's types (through schema 6).
pub fn state_from_v5(state: v5::LeaseState) -> LeaseState {
    state_from_v6(state.into())
}

/// This build's state in schema 4's types (through schema 5), if schema 4 can express it.
pub fn state_to_v4(state: &LeaseState) -> Result<v4::LeaseState, NotExpressible> {
    v4::LeaseState::try_from(state_to_v5(state)?)
}

/// A schema 4 state in this build's types (through schema 5).
pub fn state_from_v4(state: v4::LeaseState) -> LeaseState {
    state_from_v5(state.into())
}

/// This build's state in schema 3's types (through schema 4), if schema 3 can express it.
pub fn state_to_v3(state: &LeaseState) -> Result<v3::LeaseState, NotExpressible> {
    v3::LeaseState::try_from(state_to_v4(state)?)
}

/// A schema 3 state in this build's types (through schema 4).
pub fn state_from_v3(state: v3::LeaseState) -> LeaseState {
    state_from_v4(state.into())
}

/// This build's state in schema 2's types (through schema 3), if schema 2 can express it.
pub fn state_to_v2(state: &LeaseState) -> Result<v2::LeaseState, NotExpressible> {
    v2::LeaseState::try_from(state_to_v3(state)?)
}

/// A schema 2 state in this build's types (through schema 3).
pub fn state_from_v2(state: v2::LeaseState) -> LeaseState {
    state_from_v3(state.into())
}
