//! The PostgreSQL engine. Only its database seam exists so far: [`admin`], what the engine will
//! ask of a PostgreSQL instance (server state, WAL positions, replication, promotion, roles and
//! databases). The engine itself (validate, build, steps, the pipeline) is not implemented yet.

pub mod admin;
