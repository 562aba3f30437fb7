"""POST /v1/exports: build the vLLM latency_specialized wheel from the winners; GET its file.

The build runs in the API process: it reads the DB and runs `pip wheel` on trusted templates and
sources that already passed the pipeline. The one step that runs variant code, the ahead-of-time compile of the CuTe
DSL entries (export/aot.py), runs it in a child process with limits, not here.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field
from sqlalchemy import select

from db.models import ExportRecord
from export import ExportError, ExportRefused, ExportResult, export_package
from service.deps import SessionDep, SettingsDep
from service.errors import ERROR_RESPONSES

router = APIRouter(prefix="/v1/exports", tags=["exports"], responses=ERROR_RESPONSES)


class ExportCreate(BaseModel):
    hardware: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    model: str = Field(min_length=1, max_length=128)
    allow_partial: bool = False
    version: str = Field(default="0.1.0", pattern=r"^\d+(\.\d+){0,3}$")
    every_m: bool = Field(default=False, description="ship a winner only where its runs checked every batch size its "
                                                    "bucket serves (POST /v1/winners/bucket-checks fills the rest)")
    aot: bool = Field(default=True, description="compile the CuTe DSL entries for the evidence's arch now, at every "
                                                "batch size they serve, so vLLM JIT-compiles nothing at start")


def exports_dir(settings: SettingsDep) -> Path:
    return Path(settings.data_dir) / "exports"


@router.post("", response_model=ExportResult, status_code=201)
def create_export(body: ExportCreate, session: SessionDep, settings: SettingsDep) -> ExportResult:
    try:
        return export_package(session, hardware=body.hardware, model=body.model, out_dir=exports_dir(settings),
                              allow_partial=body.allow_partial, version=body.version, every_m=body.every_m,
                              aot=body.aot)
    except ExportRefused as exc:
        raise HTTPException(409, detail=str(exc)) from exc
    except ExportError as exc:
        raise HTTPException(500, detail=f"export failed: {exc}") from exc


@router.get("/{export_id}/wheel", response_class=FileResponse)
def get_wheel(export_id: int, session: SessionDep, settings: SettingsDep) -> FileResponse:
    record = session.scalar(select(ExportRecord).where(ExportRecord.id == export_id))
    if record is None:
        raise HTTPException(404, detail=f"no export {export_id}")
    path = exports_dir(settings) / record.wheel_filename
    if not path.is_file():
        raise HTTPException(410, detail=f"the wheel of export {export_id} is no longer on disk; export again")
    return FileResponse(path, filename=record.wheel_filename, media_type="application/octet-stream")
