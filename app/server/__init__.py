"""The HTTP server: the FastAPI app and its routes (`app`), access rules (`auth`), figures (`metrics`) and request
limits (`request_body`). The transports and the OpenAI-compatible APIs bring their own routers."""
