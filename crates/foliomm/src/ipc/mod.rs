//! Inter-process communication that shares memory (ipc/): System V
//! shared memory segments ([`shm`]).
#![warn(missing_docs)]

pub mod shm;

pub use shm::ShmIds;
