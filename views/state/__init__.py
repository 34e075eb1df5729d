"""What a browser session and the server keep: the request, the shared cache of jobs, the link, the pages."""
