"""Multipart parsing that refuses an unusable file name instead of silently dropping the file."""

from typing import Any

from django.conf import settings
from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from rest_framework.exceptions import ParseError
from rest_framework.parsers import DataAndFiles
from rest_framework.parsers import MultiPartParser as DrfMultiPartParser

from core.errors import FieldError, InvalidInput


class _StrictDjangoParser(DjangoMultiPartParser):
    def sanitize_file_name(self, file_name: str) -> str | None:
        clean = super().sanitize_file_name(file_name)
        if not clean:  # Django drops the whole file part for "", "." and ".." (after stripping paths)
            shown = file_name.encode("unicode_escape").decode()[:100]
            raise InvalidInput([FieldError(None, "filename", f"{shown!r} is not a usable file name")])
        return clean


class MultiPartParser(DrfMultiPartParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> DataAndFiles:
        parser_context = parser_context or {}
        request = parser_context["request"]
        meta = request.META.copy()
        meta["CONTENT_TYPE"] = media_type
        try:
            parser = _StrictDjangoParser(
                meta,
                stream,
                request.upload_handlers,
                parser_context.get("encoding", settings.DEFAULT_CHARSET),
            )
            data, files = parser.parse()
        except MultiPartParserError as exc:
            raise ParseError(f"Multipart form parse error - {exc}") from None
        return DataAndFiles(data, files)
