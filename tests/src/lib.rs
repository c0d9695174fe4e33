//! Harness for multi-process tests: starts the real `leasehold-manager` and `leasehold-executor`
//! binaries on 127.0.0.1 and drives them over HTTP.
