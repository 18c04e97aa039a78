"""Dependencies routes take: the app's database and settings (built by the app factory)."""

from __future__ import annotations

from fastapi import Request

from db.session import Database

from catalog.settings import Settings


def get_db(request: Request) -> Database:
    return request.app.state.db


def get_settings(request: Request) -> Settings:
    return request.app.state.settings
