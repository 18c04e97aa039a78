"""Dependencies routes take: the app's database and settings (built by the app factory), as
`Annotated` aliases so a route says `db: DatabaseDep` instead of repeating `Depends(...)`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from catalog.settings import Settings
from db.session import Database


def get_db(request: Request) -> Database:
    return request.app.state.db


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


DatabaseDep = Annotated[Database, Depends(get_db)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
