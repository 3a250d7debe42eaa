"""What the service does on a request's behalf, apart from the request itself (the FastAPI template's ``crud.py``):
the routes and the dashboard's pages call these with the ``Service`` their dependencies gave them."""
