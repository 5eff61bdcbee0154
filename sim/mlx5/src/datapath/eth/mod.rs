//! The Ethernet data path: send queues ([`tx`]) put frames on the port, receive queues
//! ([`rx`]) take the frames steering hands to a TIR; [`headers`] is what both read of a
//! frame's headers and the checksums they offload.

pub mod headers;
pub mod rx;
pub mod tx;
