"""Meta Storage consensus: Raft with voters and learners, durable log, snapshots."""

from schemasync.raft.node import RaftNode
from schemasync.raft.replica_state import StateMachine
from schemasync.raft.storage import LogEntry

__all__ = ["LogEntry", "RaftNode", "StateMachine"]
