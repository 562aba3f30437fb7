"""The kerneltune HTTP API (FastAPI): create_app(settings) in service.app."""
