"""API docs that work without the internet: Swagger UI at /docs and ReDoc at /redoc, their
scripts and styles served from the fastapi-offline package instead of FastAPI's default CDN
(research clusters are often cut off, and a CDN page there is blank)."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs/assets"
ASSETS_DIR = files("fastapi_offline") / "static"
# Swagger UI otherwise asks a public validator about the schema and shows its badge.
SWAGGER_PARAMETERS = {"validatorUrl": None, "defaultModelsExpandDepth": 0}
# The browser itself refuses anything not from this service: ReDoc's side menu always shows a
# logo from the vendor's CDN, and a future bundle might add more. (Inline scripts start the UIs;
# ReDoc's search runs in a blob: worker.)
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
                           "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; "
                           "connect-src 'self'; frame-ancestors 'self'")


def _local_only(page: HTMLResponse) -> HTMLResponse:
    page.headers["content-security-policy"] = CONTENT_SECURITY_POLICY
    return page


def install_offline_docs(app: FastAPI) -> None:
    """Call on an app created with docs_url=None and redoc_url=None."""
    app.mount(ASSETS_URL, StaticFiles(directory=str(ASSETS_DIR)), name="docs-assets")
    redirect_url = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _local_only(get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - API docs",
            oauth2_redirect_url=redirect_url,
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        ))

    @app.get(redirect_url, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _local_only(get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - API reference",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png", with_google_fonts=False,
        ))
