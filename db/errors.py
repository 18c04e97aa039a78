"""Domain errors of the database layer. The API maps them to HTTP statuses (api/errors.py); nothing
below api/ knows about HTTP."""

from __future__ import annotations


class DomainError(Exception):
    """Base class: a failure the caller can act on, with a message fit for a user."""


class NotFound(DomainError):
    pass


class Conflict(DomainError):
    """The request contradicts the current state (cancel a finished job, a publish race lost)."""


class InvalidRequest(DomainError):
    """The request is well-formed JSON but asks for something that cannot be done."""


class InvalidData(InvalidRequest):
    """The database refused a value (too long for its column, out of an integer's range, a check
    constraint): the request's data, never an outage."""


class DatabaseUnavailable(DomainError):
    """The database could not be reached, or stayed busy through every retry."""


class LeaseLost(DomainError):
    """A worker's fenced write matched no row: its lease expired, its job was re-claimed or cancelled."""
