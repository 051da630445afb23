//! (tests only) An in-memory FoundationDB for step tests, behind the same seam as the real
//! tools. It keeps what the steps depend on and enforces it: `configure new` only once, an
//! excluded storage process keeps its role until its data has moved (`finish_moves`), roles and
//! exclusions in the status, coordinators, keys, and which commands ran.
