"""The Streamlit app: pages (``routes``), what they share (``widgets``), what sessions and the server keep (``state``).

Not named pages/: Streamlit would auto-route that folder, and a first visit to /lab on a fresh server would then
run the page without app.py."""
