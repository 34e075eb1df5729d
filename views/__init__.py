"""Streamlit pages, routed by app.py's st.navigation. Not named pages/: Streamlit would also auto-route that
folder, and a first visit to /lab on a fresh server would then run the page without app.py."""
